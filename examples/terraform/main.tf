# Deploys two of the examples with their triggers: hello-node behind a
# public HTTP route, simple-python on a cron schedule and a queue.
#
#   export SLESS_URL=http://127.0.0.1:8080 SLESS_TOKEN=<tenant token> SLESS_TENANT=demo
#   tofu apply
#
# No `tofu init`: the provider is found through a development override
# (docs/terraform.md, "Installing the provider"), and `make tofu` links
# OpenTofu as bin/tofu.

terraform {
  required_providers {
    sless = {
      source = "kube5s/sless"
    }
  }
}

provider "sless" {}

resource "sless_function" "hello" {
  name        = "tf-hello"
  runtime     = "nodejs20"
  entrypoint  = "index.handler"
  source_dir  = "${path.module}/../hello-node"
  memory_mb   = 128
  timeout_sec = 10
}

resource "sless_trigger" "hello" {
  name     = "tf-hello"
  function = sless_function.hello.name
  type     = "http"
  http = {
    path    = "/tf-hello"
    methods = ["GET"]
    auth    = "none"
  }
}

resource "sless_function" "reverse" {
  name        = "tf-reverse"
  runtime     = "python3.11"
  entrypoint  = "main.handler"
  source_dir  = "${path.module}/../simple-python"
  concurrency = 4
  env_vars = {
    LOG_LEVEL = "info"
  }
}

resource "sless_trigger" "reverse_cron" {
  name     = "tf-reverse-hourly"
  function = sless_function.reverse.name
  type     = "cron"
  cron = {
    schedule = "@hourly"
    payload  = jsonencode({ text = "from cron" })
  }
}

resource "sless_trigger" "reverse_queue" {
  name     = "tf-reverse-queue"
  function = sless_function.reverse.name
  type     = "queue"
  queue = {
    queue       = "tf-reverse"
    max_retries = 2
  }
}

output "hello_url" {
  value = sless_trigger.hello.url
}

output "reverse_source_sha256" {
  value = sless_function.reverse.source_sha256
}

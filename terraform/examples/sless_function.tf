resource "sless_function" "example" {
  name        = "reverse"
  runtime     = "python3.11"
  entrypoint  = "main.handler"
  memory_mb   = 128
  timeout_sec = 10
  env_vars    = { LOG_LEVEL = "info" }
  source_dir  = "${path.module}/reverse"

  timeouts = {
    create = "10m"
  }
}

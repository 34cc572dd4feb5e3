resource "sless_trigger" "web" {
  name     = "reverse-web"
  function = sless_function.example.name
  type     = "http"
  http = {
    path = "/reverse"
    auth = "none"
  }
}

resource "sless_trigger" "nightly" {
  name     = "reverse-nightly"
  function = sless_function.example.name
  type     = "cron"
  cron = {
    schedule  = "0 3 * * *"
    time_zone = "Europe/Moscow"
    payload   = jsonencode({ text = "nightly" })
  }
}

resource "sless_trigger" "numbers" {
  name     = "reverse-numbers"
  function = sless_function.example.name
  type     = "queue"
  queue = {
    queue       = "numbers"
    max_retries = 3
  }
}

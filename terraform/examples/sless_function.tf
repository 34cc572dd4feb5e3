resource "sless_function" "example" {
  name        = "reverse"
  runtime     = "python3.11"
  entrypoint  = "main.handler"
  memory_mb   = 128
  timeout_sec = 10
  env_vars    = { LOG_LEVEL = "info" }
  source_dir  = "${path.module}/reverse"

  # Optional: 90 % of the calls to version 3, 10 % to each new version
  # (which `reverse@canary` reaches at any share). Without it the platform
  # sends everything to the latest version.
  traffic = [
    { version = 3, percent = 90 },
    { latest = true, percent = 10, tag = "canary" },
  ]

  timeouts = {
    create = "10m"
  }
}

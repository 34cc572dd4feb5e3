# Runs once for each new run_id, once the function is Ready.
resource "sless_job" "backfill" {
  name     = "backfill"
  function = sless_function.example.name
  run_id   = 1
  payload  = jsonencode({ text = "backfill" })
}

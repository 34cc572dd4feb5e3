# With the admin token.
resource "sless_tenant" "team" {
  name          = "team-a"
  display_name  = "Team A"
  max_functions = 20
}

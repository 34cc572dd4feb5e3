# With the admin token. The token is shown once, kept in the state (sensitive).
resource "sless_tenant_token" "ci" {
  tenant = sless_tenant.team.name
  name   = "ci"
}

output "ci_token" {
  value     = sless_tenant_token.ci.token
  sensitive = true
}

data "sless_tenant" "me" {
  name = "demo"
}

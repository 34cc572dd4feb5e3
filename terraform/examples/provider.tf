terraform {
  required_providers {
    sless = {
      source = "kube5s/sless"
    }
  }
}

# url, token and tenant default to SLESS_URL, SLESS_TOKEN and SLESS_TENANT.
provider "sless" {
  url    = "http://127.0.0.1:8080"
  tenant = "demo"
}

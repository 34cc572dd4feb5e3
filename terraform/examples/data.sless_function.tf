data "sless_function" "reverse" {
  name = "reverse"
}

output "reverse_url" {
  value = data.sless_function.reverse.url
}

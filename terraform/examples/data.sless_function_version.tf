# The latest version (set number to read another).
data "sless_function_version" "reverse" {
  function = "reverse"
}

output "reverse_latest" {
  value = "v${data.sless_function_version.reverse.number}: source ${data.sless_function_version.reverse.source_sha256}, ${data.sless_function_version.reverse.percent} % of the calls"
}

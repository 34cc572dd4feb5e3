// Package helm holds the tests of the sless Helm chart (deploy/helm/sless):
// lint, rendering with golden files, schema checks, server-side dry-run of
// every object against a real kube-apiserver, Pod Security of every pod,
// and the RBAC of each component exercised by impersonation.
package helm

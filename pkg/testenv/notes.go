package testenv

import "strings"

// NotesCommands returns the shell commands of the Helm chart's NOTES
// (deploy/helm/sless/templates/NOTES.txt), in order: every line indented by
// two spaces is a command, and a line ending in a backslash goes on with the
// next one. The chart's tests render them, and the cluster test runs them.
func NotesCommands(notes string) []string {
	var out []string
	var cur strings.Builder
	cont := false
	for _, l := range strings.Split(notes, "\n") {
		if !cont && (!strings.HasPrefix(l, "  ") || strings.TrimSpace(l) == "") {
			continue
		}
		if cont {
			cur.WriteString("\n")
		}
		if !cont {
			l = strings.TrimPrefix(l, "  ")
		}
		cur.WriteString(l)
		cont = strings.HasSuffix(l, "\\")
		if !cont {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

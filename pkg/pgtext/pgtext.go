// Package pgtext makes bytes a tenant controls storable in a PostgreSQL
// text column. PostgreSQL refuses a NUL byte and invalid UTF-8 in text
// (SQLSTATE 22021), and a refused row must never block the rows around it,
// so every tenant string passes through Clean on its way to the database,
// and through Clean again when it is looked up, so that both sides agree.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Clean replaces every NUL byte and every invalid UTF-8 sequence of s with
// U+FFFD. Valid text without NUL is returned unchanged (and not copied).
func Clean(s string) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

package ops

import "strings"

// CommonPrefix returns the common prefix key rolls up to in a listing with
// a delimiter: prefix plus the remainder up to and including the first
// delimiter after prefix. The OSDs' object listing and the SDK's listing
// of uploads both roll up by it, so they agree.
func CommonPrefix(key, prefix, delimiter string) (string, bool) {
	if delimiter == "" || !strings.HasPrefix(key, prefix) {
		return "", false
	}
	i := strings.Index(key[len(prefix):], delimiter)
	if i < 0 {
		return "", false
	}
	return key[:len(prefix)+i+len(delimiter)], true
}

// IsCommonPrefix reports whether marker is a common prefix of delimiter
// under prefix (what a listing that rolled up keys answers as its next
// marker): a listing resumed after it goes on after everything it
// rolled up.
func IsCommonPrefix(marker, prefix, delimiter string) bool {
	cp, ok := CommonPrefix(marker, prefix, delimiter)
	return ok && cp == marker
}

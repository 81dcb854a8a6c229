package sigv4

import (
	"encoding/hex"
	"testing"
)

// TestDeriveKey is AWS's published example of a derived signing key
// (IAM's "Examples of how to derive a signing key for Signature Version 4").
func TestDeriveKey(t *testing.T) {
	k := DeriveKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
	if got, want := hex.EncodeToString(k.Bytes()), "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"; got != want {
		t.Fatalf("key %s, want %s", got, want)
	}
}

// TestAppendSignature is the GET example of AWS's S3 SigV4 documentation
// ("Example: GET Object"), whose canonical request is spelled out there.
func TestAppendSignature(t *testing.T) {
	const canonical = "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n" +
		"x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\nx-amz-date:20130524T000000Z\n\n" +
		"host;range;x-amz-content-sha256;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	k := DeriveKey("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3")
	scope := AppendScope(nil, "20130524", "us-east-1", "s3")
	for range 2 { // the second from a pooled HMAC, which must have been reset
		if got, want := string(AppendSignature(nil, k, "20130524T000000Z", scope, []byte(canonical))),
			"f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"; got != want {
			t.Fatalf("signature %s, want %s", got, want)
		}
	}
	// It runs on every request the gateway serves.
	dst := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { AppendSignature(dst[:0], k, "20130524T000000Z", scope, []byte(canonical)) }); n != 0 && !raceEnabled {
		t.Fatalf("%v allocations per signature", n)
	}
}

func TestEscape(t *testing.T) {
	for _, c := range []struct {
		in        string
		keepSlash bool
		want      string
	}{
		{"photos/2026/cat.jpg", true, "photos/2026/cat.jpg"},
		{"photos/2026/cat.jpg", false, "photos%2F2026%2Fcat.jpg"},
		{"a b+c~d_e-f.g", true, "a%20b%2Bc~d_e-f.g"},
		{"é*", true, "%C3%A9%2A"},
		{"", true, ""},
	} {
		if got := Escape(c.in, c.keepSlash); got != c.want {
			t.Errorf("Escape(%q, %v) = %q, want %q", c.in, c.keepSlash, got, c.want)
		}
		if got := string(AppendEscape([]byte("x"), c.in, c.keepSlash)); got != "x"+c.want {
			t.Errorf("AppendEscape(%q, %v) = %q, want %q", c.in, c.keepSlash, got, "x"+c.want)
		}
	}
}

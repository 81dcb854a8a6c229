package auth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// ErrInvalidS3Key: an access key id that cannot be one.
var ErrInvalidS3Key = errors.New("auth: invalid S3 access key")

// NewS3Key makes a random key pair in AWS's formats: a 20-character
// access key id of upper-case letters and digits 2-7 (100 bits), and a
// 40-character secret of the base64 alphabet (240 bits), both from
// crypto/rand.
func NewS3Key() S3Key {
	var b [30]byte
	rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return S3Key{AccessKey: rand.Text()[:20], Secret: base64.StdEncoding.EncodeToString(b[:])}
}

// maxS3AccessKey bounds an access key id as S3 does (128 characters).
const maxS3AccessKey = 128

// ValidateS3AccessKey checks an access key id given to a command: 1 to
// 128 letters and digits, as S3's access key ids are (a credential scope
// splits on "/", so no id may hold one).
func ValidateS3AccessKey(id string) error {
	if id == "" || len(id) > maxS3AccessKey {
		return fmt.Errorf("%w: %q: want 1 to %d letters and digits", ErrInvalidS3Key, id, maxS3AccessKey)
	}
	for _, r := range id {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return fmt.Errorf("%w: %q: want letters and digits only", ErrInvalidS3Key, id)
		}
	}
	return nil
}

package msgrtest

import (
	"sync"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
)

// TestCA issues keyrings for tests from one CA, a keyring per entity name
// made once and shared, so two messengers of one name present the same
// credential.
type TestCA struct {
	CA *auth.CA
	mu sync.Mutex
	k  map[string]*auth.Keyring
}

// NewTestCA makes a CA for one test.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	ca, err := auth.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	return &TestCA{CA: ca, k: map[string]*auth.Keyring{}}
}

// Keyring returns name's keyring, issuing it on first use.
func (c *TestCA) Keyring(t testing.TB, name msgr.EntityName) *auth.Keyring {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.k[string(name)]; k != nil {
		return k
	}
	k, err := c.CA.Issue(string(name))
	if err != nil {
		t.Fatal(err)
	}
	c.k[string(name)] = k
	return k
}

// WithAuth returns env with every messenger authenticating its sessions
// (Options.Auth) with a keyring of ca for its name: the conformance suite
// then runs over the "tls13" auth method.
func WithAuth(t testing.TB, env Env, ca *TestCA) Env {
	tweak := env.Tweak
	env.Tweak = func(o *msgr.Options) {
		if tweak != nil {
			tweak(o)
		}
		o.Auth = &msgr.AuthOptions{Keyring: ca.Keyring(t, o.Name)}
	}
	return env
}

// WithSecure returns env with every messenger authenticating its sessions
// with a keyring of ca and requiring secure mode: the conformance suite
// then runs with every frame after the auth step sealed.
func WithSecure(t testing.TB, env Env, ca *TestCA) Env {
	env = WithAuth(t, env, ca)
	tweak := env.Tweak
	env.Tweak = func(o *msgr.Options) {
		tweak(o)
		o.Auth.Modes = []msgr.Mode{msgr.ModeSecure}
	}
	return env
}

package auth

import (
	"context"
	"log/slog"
	"os"
	"time"
)

// DefaultWatchEvery is how often WatchKeyring looks at its file: a stat, and
// a read only when the file changed.
const DefaultWatchEvery = 2 * time.Second

// WatchOptions configure WatchKeyring.
type WatchOptions struct {
	// Path is the keyring file, e.g. an OSD's DATA/keyring.
	Path string
	// Current is the keyring in use; only another certificate of its
	// entity is applied.
	Current *Keyring
	// Apply takes a new keyring into use (Messenger.SetKeyring on each of
	// the daemon's messengers). An error is logged and the keyring offered
	// again when the file next changes.
	Apply func(*Keyring) error
	// Every is how often the file is looked at; zero is DefaultWatchEvery.
	Every  time.Duration
	Logger *slog.Logger
}

// WatchKeyring has a running daemon take up a keyring rotated under it:
// `osprey auth rotate osd.3 -o DATA/keyring` reissues the key, which the
// cluster refuses the old one of from then on, and writes the file, which
// the daemon reads here within Every and applies to its new sessions, so
// it comes back without a restart (Ceph's `orch daemon rotate-key`). A file
// that does not load (being written, or of another entity) is logged once
// per distinct error and looked at again when it changes. It returns when
// ctx ends.
func WatchKeyring(ctx context.Context, o WatchOptions) {
	if o.Every <= 0 {
		o.Every = DefaultWatchEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// The first look loads the file whatever it is: a rotation between
	// the daemon's load and this watch is taken up too.
	w := keyringWatch{WatchOptions: o}
	t := time.NewTicker(o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}

type keyringWatch struct {
	WatchOptions
	last    os.FileInfo // the file as last looked at
	lastErr string      // the last error logged, so one is not logged every tick
}

// check loads the file if it changed since last time and applies it if it
// is a new certificate of the same entity.
func (w *keyringWatch) check() {
	fi, err := os.Stat(w.Path)
	if err != nil {
		w.fail("the keyring file is gone", err)
		return
	}
	if w.last != nil && os.SameFile(w.last, fi) && fi.ModTime().Equal(w.last.ModTime()) && fi.Size() == w.last.Size() {
		return
	}
	w.last = fi
	k, err := LoadKeyring(w.Path)
	if err != nil {
		w.fail("the keyring file does not load", err)
		return
	}
	switch {
	case k.Entity != w.Current.Entity:
		w.fail("the keyring file is another entity's", errString(k.Entity+"'s, not "+w.Current.Entity+"'s"))
		return
	case k.Cert.Equal(w.Current.Cert):
		w.lastErr = ""
		return
	}
	if err := w.Apply(k); err != nil {
		w.fail("the new keyring was not taken up", err)
		return
	}
	w.lastErr = ""
	w.Current = k
	w.Logger.Info("auth: took up the rotated keyring", "entity", k.Entity, "path", w.Path, "serial", k.Cert.SerialNumber.String())
}

func (w *keyringWatch) fail(what string, err error) {
	if err.Error() == w.lastErr {
		return
	}
	w.lastErr = err.Error()
	w.Logger.Warn("auth: "+what+"; the daemon keeps its keyring", "path", w.Path, "err", err)
}

type errString string

func (e errString) Error() string { return string(e) }

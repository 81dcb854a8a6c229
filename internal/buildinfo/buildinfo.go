// Package buildinfo says which build of osprey runs: what `osprey
// version` prints, what each daemon logs when it starts, tells the mon at
// boot (`osprey versions`) and exports as osprey_build_info.
package buildinfo

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
)

// Revision, when set at link time (-ldflags "-X
// github.com/ospreystore/osprey/internal/buildinfo.Revision=..."; `make
// build` does), names the commit where the toolchain recorded none (a
// build with -buildvcs=false, or from a source tarball).
var Revision string

var (
	once    sync.Once
	version string
)

// Version is the build in one token-free line: the main module's version
// and the commit it was built from ("(devel) commit 0123456789ab", with
// "+modified" for a tree with changes). A build that recorded no commit is
// named by its executable's SHA-256 ("(devel) build 9f86d081884c"), so
// two different builds never read alike.
func Version() string {
	once.Do(func() { version = compute() })
	return version
}

func compute() string {
	bi, ok := debug.ReadBuildInfo()
	return describe(bi, ok, Revision, executableSum)
}

// describe is Version from the toolchain's record bi, the link-time
// revision, and the executable's sum (asked for only without a revision).
func describe(bi *debug.BuildInfo, ok bool, revision string, sum func() string) string {
	v, rev, modified := "(devel)", revision, false
	if ok && bi != nil {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev != "" {
		v += " commit " + short(rev)
		if modified {
			v += "+modified"
		}
		return v
	}
	if s := sum(); s != "" {
		return v + " build " + s
	}
	return v
}

func short(rev string) string { return rev[:min(len(rev), 12)] }

// executableSum is the first 12 hex digits of the running executable's
// SHA-256, "" where it cannot be read.
func executableSum() string {
	// /proc/self/exe is the file this process runs even after a new
	// build replaced it at its path, which os.Executable names.
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		path, perr := os.Executable()
		if perr != nil {
			return ""
		}
		if f, err = os.Open(path); err != nil {
			return ""
		}
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Line is `osprey version`'s: Version, the Go version and the platform.
func Line() string {
	return "osprey " + Version() + ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

package buildinfo

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	noSum := func() string { t.Fatal("the executable summed with a revision known"); return "" }
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/ospreystore/osprey", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "c12f101abc0123456789"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		bi       *debug.BuildInfo
		revision string
		sum      func() string
		want     string
	}{
		{bi, "", noSum, "v1.2.3 commit c12f101abc01+modified"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "0123456789abcdef", noSum, "v1.2.3 commit 0123456789ab"},
		{&debug.BuildInfo{}, "", func() string { return "9f86d081884c" }, "(devel) build 9f86d081884c"},
		{nil, "", func() string { return "" }, "(devel)"},
	} {
		if got := describe(c.bi, c.bi != nil, c.revision, c.sum); got != c.want {
			t.Errorf("describe = %q, want %q", got, c.want)
		}
	}
}

// TestVersionTellsBuildsApart: a test binary built without VCS stamping
// (go test records none) is named by its executable's sum, which another
// build's differs from.
func TestVersionTellsBuildsApart(t *testing.T) {
	v := Version()
	if !strings.Contains(v, " commit ") && !strings.Contains(v, " build ") {
		t.Fatalf("Version %q names neither a commit nor a build", v)
	}
	if l := Line(); !strings.HasPrefix(l, "osprey "+v+", ") || !strings.Contains(l, runtime.Version()) {
		t.Fatalf("Line %q", l)
	}
	if strings.Contains(v, " commit ") {
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir() + "/other"
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(data, 0), 0o755); err != nil { // another build: other bytes
		t.Fatal(err)
	}
	cmd := exec.Command(other, "-test.run=^TestPrintVersion$")
	cmd.Env = append(os.Environ(), "OSPREY_PRINT_VERSION=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]); got == v || !strings.Contains(got, " build ") {
		t.Fatalf("another executable's version %q, this one's %q", got, v)
	}
}

// TestPrintVersion prints Version, for TestVersionTellsBuildsApart.
func TestPrintVersion(t *testing.T) {
	if os.Getenv("OSPREY_PRINT_VERSION") == "" {
		t.Skip("run by TestVersionTellsBuildsApart")
	}
	fmt.Println(Version())
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/buildinfo"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestParseRemote(t *testing.T) {
	for _, c := range []struct {
		in          string
		bucket, key string
		bad         bool
	}{
		{in: "photos", bucket: "photos"},
		{in: "photos/", bucket: "photos"},
		{in: "photos/a.jpg", bucket: "photos", key: "a.jpg"},
		{in: "photos/2024/06/a.jpg", bucket: "photos", key: "2024/06/a.jpg"},
		{in: "photos/dir/", bucket: "photos", key: "dir/"},
		{in: "osprey://photos/2024/a.jpg", bucket: "photos", key: "2024/a.jpg"},
		{in: "osprey://photos", bucket: "photos"},
		{in: "photos//double", bucket: "photos", key: "/double"},
		{in: "", bad: true},
		{in: "/key", bad: true},
		{in: "osprey://", bad: true},
		{in: "osprey:///key", bad: true},
	} {
		got, err := parseRemote(c.in)
		if c.bad {
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Errorf("parseRemote(%q) = %v, %v; want a usage error", c.in, got, err)
			}
			continue
		}
		if err != nil || got.Bucket != c.bucket || got.Key != c.key {
			t.Errorf("parseRemote(%q) = %+v, %v; want bucket %q key %q", c.in, got, err, c.bucket, c.key)
		}
	}
	if _, err := parseObject("photos/"); exitCode(err) != exitUsage {
		t.Errorf("parseObject of a bucket: %v, want a usage error", err)
	}
	if p, _ := parseObject("b/k/x"); p.String() != "osprey://b/k/x" {
		t.Errorf("String() = %q", p.String())
	}
	for s, want := range map[string]bool{"osprey://b/k": true, "b/k": false, "./osprey://x": false, "-": false} {
		if isRemote(s) != want {
			t.Errorf("isRemote(%q) = %v", s, !want)
		}
	}
}

func TestParseSeeds(t *testing.T) {
	got, err := parseSeeds([]string{"10.0.0.1:6800, tcp://10.0.0.2:6800", "rdma+verbs://10.0.1.1:6800"})
	want := []string{"tcp://10.0.0.1:6800", "tcp://10.0.0.2:6800", "rdma+verbs://10.0.1.1:6800"}
	if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("parseSeeds = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"bogus", "tcp://bogus", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:http", "tcp://", "tcp://10.0.0.1:6800/x"} {
		if _, err := parseSeeds([]string{bad}); exitCode(err) != exitUsage {
			t.Errorf("parseSeeds(%q): %v, want a usage error", bad, err)
		}
	}
	if _, err := parseSeeds([]string{" , "}); exitCode(err) != exitUsage {
		t.Errorf("empty seeds: %v, want a usage error", err)
	}
	// The mon commands (osprey osd out, ...) take bare addresses too.
	env := func(string) string { return "10.0.0.3:3300, 10.0.0.4:3300" }
	if got, ok, err := resolveMons(monFlags{addrs: []string{"10.0.0.1:3300"}}, env); !ok || err != nil || strings.Join(got, " ") != "tcp://10.0.0.1:3300" {
		t.Errorf("resolveMons(--mon) = %v, %v", got, ok)
	}
	if got, ok, err := resolveMons(monFlags{}, env); !ok || err != nil || strings.Join(got, " ") != "tcp://10.0.0.3:3300 tcp://10.0.0.4:3300" {
		t.Errorf("resolveMons($%s) = %v, %v", envMon, got, ok)
	}
}

// writeMap saves a local map with OSDs from port and returns its path.
func writeMap(t *testing.T, dir string, port, osds int) string {
	t.Helper()
	var pub []string
	for i := range osds {
		pub = append(pub, fmt.Sprintf("tcp://127.0.0.1:%d", port+2*i))
	}
	m, err := placement.NewLocal(placement.LocalOptions{PublicAddrs: pub})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "map.json")
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestResolveTarget(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	flagMap := writeMap(t, filepath.Join(dir, "a"), 7000, 2)
	envMapPath := writeMap(t, filepath.Join(dir, "b"), 8000, 1)
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	// Nothing given, no ./osprey-data: a clear error, exit code 4.
	_, err := resolveTarget(targetFlags{}, getenv)
	if !errors.Is(err, errNoCluster) || exitCode(err) != exitUnavailable || !strings.Contains(err.Error(), "osprey up") {
		t.Fatalf("no target: %v (exit %d)", err, exitCode(err))
	}

	// Each source in turn, lowest precedence first; each later one wins.
	// Mons (the current map) come before seeds and maps in each tier.
	writeMap(t, defaultDataDir, 6800, 3)
	steps := []struct {
		apply  func(*targetFlags)
		source string
		first  string
		n      int
		mons   bool
	}{
		{func(*targetFlags) {}, "./osprey-data/map.json", "tcp://127.0.0.1:6800", 3, false},
		{func(*targetFlags) {
			os.WriteFile(monAddrFile, []byte("tcp://127.0.0.1:3300\n"), 0o644)
		}, "./" + monAddrFile, "tcp://127.0.0.1:3300", 1, true},
		{func(*targetFlags) { env[envMap] = envMapPath }, envMap + "=" + envMapPath, "tcp://127.0.0.1:8000", 1, false},
		{func(f *targetFlags) { f.mapPath = flagMap }, "--map " + flagMap, "tcp://127.0.0.1:7000", 2, false},
		{func(*targetFlags) { env[envSeeds] = "127.0.0.1:9000,127.0.0.1:9002" }, envSeeds, "tcp://127.0.0.1:9000", 2, false},
		{func(*targetFlags) { env[envMon] = "127.0.0.1:3301,127.0.0.1:3302" }, envMon, "tcp://127.0.0.1:3301", 2, true},
		{func(f *targetFlags) { f.seeds = []string{"tcp://10.1.1.1:6800"} }, "--seeds", "tcp://10.1.1.1:6800", 1, false},
		{func(f *targetFlags) { f.mon.addrs = []string{"tcp://10.1.1.2:3300"} }, "--mon", "tcp://10.1.1.2:3300", 1, true},
	}
	var f targetFlags
	for _, s := range steps {
		s.apply(&f)
		tg, err := resolveTarget(f, getenv)
		got := tg.addrs()
		if err != nil || tg.Source != s.source || len(got) != s.n || got[0] != s.first || (len(tg.Mons) > 0) != s.mons {
			t.Errorf("after setting %s: %+v, %v; want %d addresses (mons: %v) from %s starting %s", s.source, tg, err, s.n, s.mons, s.source, s.first)
		}
	}

	// A map that does not parse is an error naming the file, not a
	// fallback to the next source.
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"epoch": 0}`), 0o644)
	if _, err := resolveTarget(targetFlags{mapPath: bad}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad map: %v", err)
	}
}

func TestExitCodeAndErrorLine(t *testing.T) {
	// An OSD answers not found with the status alone; the command names
	// the object.
	noKey := fmt.Errorf("%s: %w", remotePath{"b", "k"}, &ops.Error{Status: osdpb.Status_NO_SUCH_KEY})
	if got := errorLine(noKey); got != "osprey: NoSuchKey: osprey://b/k" || !errors.Is(noKey, ops.ErrNoSuchKey) {
		t.Errorf("errorLine(%v) = %q", noKey, got)
	}
	for _, c := range []struct {
		err  error
		code int
		line string
	}{
		{noKey, exitNotFound, "osprey: NoSuchKey: osprey://b/k"},
		{ops.ErrNoSuchBucket, exitNotFound, "osprey: NoSuchBucket"},
		{ops.Errorf(osdpb.Status_NO_SUCH_UPLOAD, "x"), exitNotFound, "osprey: NoSuchUpload: x"},
		{ops.Errorf(osdpb.Status_BUCKET_NOT_EMPTY, "bucket b is not empty"), exitError, "osprey: BucketNotEmpty: bucket b is not empty"},
		{ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "no reply"), exitUnavailable, "osprey: ServiceUnavailable: no reply"},
		{&unreachableError{target: clusterTarget{Seeds: []string{"tcp://h:1"}, Source: "--seeds"}, err: errors.New("a\nb")},
			exitUnavailable, "osprey: cannot reach the cluster at tcp://h:1 (from --seeds): a; b"},
		{&unreachableError{target: clusterTarget{Seeds: []string{"tcp://h:1"}, Source: "--seeds"}, err: errors.New("tcp://h:1: ServiceUnavailable: etcd: etcdserver: no leader")},
			exitUnavailable, "osprey: the mons at tcp://h:1 (from --seeds) answer, but their etcd cluster has no quorum: bring its members back (etcdctl endpoint status --cluster): tcp://h:1: ServiceUnavailable: etcd: etcdserver: no leader"},
		{errNoCluster, exitUnavailable, "osprey: no cluster given"},
		{&noMapError{source: "--map /x", err: os.ErrNotExist}, exitUnavailable, "osprey: --map /x: the cluster map file does not exist"},
		{usageErrorf("bad"), exitUsage, "osprey: bad"},
		{errors.New(`unknown command "x" for "osprey"`), exitUsage, `osprey: unknown command "x" for "osprey"`},
		{fmt.Errorf("put: %w", context.Canceled), exitInterrupted, "osprey: interrupted"},
		{errors.New("disk full"), exitError, "osprey: disk full"},
	} {
		if got := exitCode(c.err); got != c.code {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.code)
		}
		if got := errorLine(c.err); !strings.HasPrefix(got, c.line) {
			t.Errorf("errorLine(%v) = %q, want it to start %q", c.err, got, c.line)
		}
	}
}

// TestUsageExitCodes runs the command tree in process: argument mistakes
// must be usage errors (exit 2) before anything touches the network.
func TestUsageExitCodes(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv(envMon, "")
	t.Setenv(envSeeds, "")
	t.Setenv(envMap, "")
	for _, args := range [][]string{
		{"get"},
		{"put", "onlyone"},
		{"ls", "a", "b"},
		{"ls", "--no-such-flag"},
		{"cp", "local", "alsolocal"},
		{"rm", "bucketonly"},
		{"mb", "b/k"},
		{"status", "extra"},
		{"up", "--osds", "0"},
		{"up", "--osds", "2", "--replicas", "3"},
		{"osd", "ok-to-stop", "osd.x"},
		{"nosuchcommand"},
		{"bench", "msgr", "--mode", "bogus"},
		{"bench", "obj", "--op", "fly"},
		{"bench", "msgr", "--json", "--csv"},
		{"bench", "plot", "run.json", "dir", "--plot-format", "gif"},
		{"put", "file", "b/k", "--part-size", "1MiB"},
		{"cp", "file", "osprey://b/k", "--part-size", "65MiB"},
		{"put", "file", "b/k", "--part-size", "lots"},
	} {
		_, _, err := run(t, args...)
		if exitCode(err) != exitUsage {
			t.Errorf("osprey %s: %v (exit %d), want exit %d", strings.Join(args, " "), err, exitCode(err), exitUsage)
		}
	}
	// No cluster anywhere: exit 4 with advice.
	_, _, err := run(t, "ls")
	if exitCode(err) != exitUnavailable || !strings.Contains(errorLine(err), "--seeds") {
		t.Errorf("ls with no cluster: %v (exit %d)", err, exitCode(err))
	}
	// A map file that does not exist names no cluster either.
	_, _, err = run(t, "ls", "--map", "/nonexistent")
	if exitCode(err) != exitUnavailable || !strings.Contains(errorLine(err), "/nonexistent") {
		t.Errorf("ls --map /nonexistent: %v (exit %d)", err, exitCode(err))
	}
	t.Setenv(envMap, "/nonexistent/map.json")
	_, _, err = run(t, "stat", "b/k")
	if exitCode(err) != exitUnavailable || !strings.Contains(errorLine(err), envMap+"=/nonexistent/map.json") {
		t.Errorf("stat with %s naming no file: %v (exit %d)", envMap, err, exitCode(err))
	}
	// A keyring file that cannot be read is a local file's error: exit 1.
	_, _, err = run(t, "status", "--mon", "tcp://127.0.0.1:1", "--keyring", "/nonexistent.keyring")
	if exitCode(err) != 1 || !strings.Contains(errorLine(err), "keyring") {
		t.Errorf("status with a keyring file that does not exist: %v (exit %d), want exit 1", err, exitCode(err))
	}
}

// TestUnknownSubcommandIsUsageError walks the whole command tree: every
// command with subcommands, at any depth, must refuse one it does not
// have with exit 2, as the root does, not print its help and exit 0, which
// a script would take for success.
func TestUnknownSubcommandIsUsageError(t *testing.T) {
	t.Chdir(t.TempDir())
	var parents [][]string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() {
			parents = append(parents, strings.Fields(c.CommandPath())[1:])
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	// The walk must see the parents there are now, the default
	// completion command among them; new ones add themselves.
	for _, want := range []string{"", "auth", "auth s3-key", "pg", "bench", "completion", "osd"} {
		if !slices.ContainsFunc(parents, func(p []string) bool { return strings.Join(p, " ") == want }) {
			t.Errorf("the walk found no parent command %q among %q", want, parents)
		}
	}
	for _, p := range parents {
		args := append(slices.Clone(p), "bogus")
		out, _, err := run(t, args...)
		if exitCode(err) != exitUsage || !strings.Contains(errorLine(err), `unknown command "bogus"`) {
			t.Errorf("osprey %s: %v (exit %d), want exit %d for an unknown command\n%s",
				strings.Join(args, " "), err, exitCode(err), exitUsage, out)
		}
	}
	// "help" after any command group is its help, as git's.
	for _, p := range parents {
		if len(p) == 0 || p[0] == "completion" {
			continue // the root's own help command; completion's scripts
		}
		args := append(slices.Clone(p), "help")
		out, _, err := run(t, args...)
		if err != nil || !strings.Contains(out, "Usage:") {
			t.Errorf("osprey %s: %v, want its help\n%s", strings.Join(args, " "), err, out)
		}
	}
	// A near miss with arguments after it, as the probe typed it.
	_, _, err := run(t, "auth", "s3-key", "ls", "client.x")
	if exitCode(err) != exitUsage || !strings.Contains(errorLine(err), `unknown command "ls"`) {
		t.Errorf("osprey auth s3-key ls client.x: %v (exit %d), want exit %d", err, exitCode(err), exitUsage)
	}
	// A typo gets the command it is near.
	_, _, err = run(t, "pg", "deep-scrb", "1.0")
	if exitCode(err) != exitUsage || !strings.Contains(errorLine(err), "did you mean deep-scrub?") {
		t.Errorf("osprey pg deep-scrb 1.0: %v (exit %d), want exit %d with a suggestion", err, exitCode(err), exitUsage)
	}
	// help takes only commands that exist, at any depth.
	for _, topic := range [][]string{{"bogus"}, {"osd", "bogus"}, {"osd", "tree", "bogus"}} {
		_, _, err = run(t, append([]string{"help"}, topic...)...)
		if exitCode(err) != exitUsage || !strings.Contains(errorLine(err), "unknown help topic") {
			t.Errorf("osprey help %s: %v (exit %d), want exit %d", strings.Join(topic, " "), err, exitCode(err), exitUsage)
		}
	}
	if out, _, err := run(t, "help", "osd", "tree"); err != nil || !strings.Contains(out, "osprey osd tree [flags]") {
		t.Errorf("osprey help osd tree: %v, want the tree's help:\n%s", err, out)
	}
	// With no subcommand at all a parent still shows its help.
	out, _, err := run(t, "auth")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("osprey auth: %v, want its help:\n%s", err, out)
	}
}

// TestMonCommandTimeoutNamesRequestID: a command that changes something
// and timed out after a mon may have got it says how to rerun it safely:
// with its request id. One that reached no mon does not (a plain rerun
// is safe), nor does one that changes nothing.
func TestMonCommandTimeoutNamesRequestID(t *testing.T) {
	t.Chdir(t.TempDir())
	silent := msgrtest.Serve(t, "mon.silent", func(*msgr.Message) {}) // takes requests, never answers
	_, _, err := run(t, "osd", "out", "0", "--mon", silent, "--mon-timeout", "300ms", "--keyring", "none")
	if exitCode(err) != exitUnavailable || !strings.Contains(errorLine(err), "it may have been applied: rerun with --request-id ") {
		t.Fatalf("osd out to a mon that never answers: %v (exit %d)", err, exitCode(err))
	}
	_, _, err = run(t, "osd", "out", "0", "--mon", "tcp://127.0.0.1:1", "--mon-timeout", "300ms", "--keyring", "none")
	if exitCode(err) != exitUnavailable || strings.Contains(errorLine(err), "may have been applied") {
		t.Fatalf("osd out with no mon listening: %v (exit %d), want no rerun hint", err, exitCode(err))
	}
	_, _, err = run(t, "status", "--mon", "tcp://127.0.0.1:1", "--mon-timeout", "300ms", "--keyring", "none")
	if exitCode(err) != exitUnavailable || strings.Contains(errorLine(err), "--request-id") {
		t.Fatalf("status with no mon: %v (exit %d)", err, exitCode(err))
	}
}

func TestUpRefusesConflictingFlags(t *testing.T) {
	dir := t.TempDir()
	writeMap(t, dir, 7000, 3)
	_, _, err := run(t, "up", "--dir", dir, "--osds", "2", "--port", "7100")
	if exitCode(err) != exitUsage {
		t.Fatalf("up with flags against the map: %v, want a usage error", err)
	}
	for _, want := range []string{"--osds 2 (the map has 3)", "tcp://127.0.0.1:7100", "another --dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestUpRefusesDirInUse: a second `osprey up` on a directory a running
// cluster holds fails at once (exit 1) and names the directory. It used
// to block for ever in the embedded etcd's open of its database, which
// waits on its own file lock and heeds no signal.
func TestUpRefusesDirInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	dir := t.TempDir()
	osdtest.StartLocal(t, local.Options{OSDs: 1, PGs: 8, WithMon: true, Dir: dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// With flags that contradict its map too: the directory in use is
	// what is wrong.
	for _, extra := range [][]string{nil, {"--osds", "5"}} {
		done := make(chan error, 1)
		go func() {
			_, _, err := run(t, append([]string{"up", "--dir", dir, "--log-level", "warn"}, extra...)...)
			done <- err
		}()
		select {
		case err := <-done:
			if exitCode(err) != exitError || !strings.Contains(errorLine(err), dir+" is in use") {
				t.Fatalf("second up %v on %s: %v (exit %d), want exit %d naming the directory", extra, dir, err, exitCode(err), exitError)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("second up %v on %s still running after 20s, want it to fail at once", extra, dir)
		}
	}
}

// TestUpPrintsHowToReachIt follows what `osprey up` prints for commands
// run in another directory, in both its forms (the default --dir, and
// another), and looks in the directory it names for etcd's data.
func TestUpPrintsHowToReachIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	top := t.TempDir()
	c := osdtest.StartLocal(t, local.Options{OSDs: 1, PGs: 8, WithMon: true, Dir: filepath.Join(top, defaultDataDir),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	lc := &localCluster{Cluster: c, keyring: c.KeyringPath("client.admin")}
	elsewhere := t.TempDir()
	for _, wd := range []string{top, elsewhere} {
		t.Chdir(wd)
		var b strings.Builder
		printServing(&b, upOptions{}, lc)
		out := b.String()

		m := regexp.MustCompile(`etcd embedded, data in (\S+)\)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("in %s: no etcd data directory printed:\n%s", wd, out)
		}
		if fi, err := os.Stat(filepath.Join(m[1], "member")); err != nil || !fi.IsDir() {
			t.Errorf("in %s: the printed etcd data directory %s holds no etcd member/: %v", wd, m[1], err)
		}

		// "  export K=V" lines, or "(from elsewhere: export K=V K=V)".
		env := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			line = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "(from elsewhere: "), ")")
			if rest, ok := strings.CutPrefix(line, "export "); ok {
				for _, kv := range strings.Fields(rest) {
					k, v, _ := strings.Cut(kv, "=")
					env[k] = v
				}
			}
		}
		for _, k := range []string{envMon, envSeeds, envMap, envKeyring} {
			t.Setenv(k, env[k])
		}
		t.Chdir(t.TempDir())
		if _, _, err := run(t, "ls"); err != nil {
			t.Errorf("printed in %s, ls elsewhere with %v: %v\n%s", wd, env, err, out)
		}
	}
}

// TestShellWord: what up prints to paste into a shell quotes a path only
// when the shell would split or expand it.
func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/osp/client.admin.keyring":         "/tmp/osp/client.admin.keyring",
		"/home/me/My Data/client.admin.keyring": "'/home/me/My Data/client.admin.keyring'",
		"/data/$HOME":                           "'/data/$HOME'",
		"it's":                                  `'it'\''s'`,
		"":                                      "''",
	} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestUpDemo runs `osprey up --demo` in process on a one-OSD cluster with
// small objects: the demo must pass and say what it did.
func TestUpDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	for _, tc := range []struct {
		auth, admin string // --auth, and what the admin line says
	}{
		{"cert", "client.admin's keyring in /"},
		{"none", "no keyring: authentication is off"},
	} {
		t.Run(tc.auth, func(t *testing.T) {
			out, _, err := run(t, "up", "--demo", "--temp", "--osds", "1", "--demo-sizes", "0,1KiB,3MiB", "--log-level", "warn", "--auth", tc.auth)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, want := range []string{"serving 1 OSDs", tc.admin, "make-bucket", "put ", "read-at", "bytes verified", "remove-bucket", "demo passed"} {
				if !strings.Contains(out, want) {
					t.Errorf("demo output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestPattern(t *testing.T) {
	const seed = 42
	all, err := io.ReadAll(&patternReader{seed: seed, size: 1000})
	if err != nil || len(all) != 1000 {
		t.Fatalf("ReadAll: %d bytes, %v", len(all), err)
	}
	// Any range filled on its own equals the same range read in sequence.
	for _, r := range [][2]int{{0, 1}, {3, 17}, {7, 8}, {8, 16}, {500, 1000}, {999, 1000}} {
		b := make([]byte, r[1]-r[0])
		fillPattern(b, seed, int64(r[0]))
		if !bytes.Equal(b, all[r[0]:r[1]]) {
			t.Errorf("range %v differs from the sequential read", r)
		}
	}
	chk := &patternChecker{seed: seed, bad: -1}
	chk.Write(all[:333])
	bad := bytes.Clone(all[333:])
	bad[100] ^= 1
	chk.Write(bad)
	if chk.bad != 433 {
		t.Errorf("checker found the flipped byte at %d, want 433", chk.bad)
	}
	var other [16]byte
	fillPattern(other[:], seed+1, 0)
	if bytes.Equal(other[:], all[:16]) {
		t.Error("two seeds give the same bytes")
	}
}

func TestPGState(t *testing.T) {
	up := map[uint32]bool{0: true, 1: true, 2: false}
	for _, c := range []struct {
		acting []uint32
		size   uint32
		want   string
	}{
		{[]uint32{0, 1}, 2, pgActiveClean},
		{[]uint32{0, 1}, 3, pgUndersized},
		{[]uint32{0, 2}, 2, pgDegraded},
		{[]uint32{2, 0}, 2, pgDown},
		{nil, 3, pgDown},
	} {
		if got := pgState(c.acting, c.size, up); got != c.want {
			t.Errorf("pgState(%v, size %d) = %s, want %s", c.acting, c.size, got, c.want)
		}
	}
}

func TestDownloadPath(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ dst, key, want string }{
		{"out.bin", "a/b/c.bin", "out.bin"},
		{dir, "a/b/c.bin", filepath.Join(dir, "c.bin")},
		{"newdir/", "c.bin", filepath.Join("newdir", "c.bin")},
		{".", "x/y", "y"},
	} {
		if got, err := downloadPath(c.dst, c.key); err != nil || got != c.want {
			t.Errorf("downloadPath(%q, %q) = %q, %v; want %q", c.dst, c.key, got, err, c.want)
		}
	}
	for _, key := range []string{"dir/", "a/..", "."} {
		if got, err := downloadPath(".", key); err == nil {
			t.Errorf("key %q into a directory gave file %q", key, got)
		}
	}
	if got, err := downloadPath("out", "dir/"); err != nil || got != "out" {
		t.Errorf("key dir/ to a named file: %q, %v", got, err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	os.WriteFile(name, []byte("old"), 0o644)
	err := writeFileAtomic(name, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return errors.New("connection lost")
	})
	if err == nil {
		t.Fatal("no error")
	}
	if b, _ := os.ReadFile(name); string(b) != "old" {
		t.Errorf("a failed write changed the file to %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("a failed write left %d files", len(ents))
	}
	if err := writeFileAtomic(name, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(name); string(b) != "new" {
		t.Errorf("file holds %q, want new", b)
	}
}

func TestProgressLine(t *testing.T) {
	p := &progress{label: "put photos/2024/a-rather-long-key-name.bin", total: 100 << 20}
	for _, width := range []int{40, 80, 200} {
		l := p.line(42<<20, 2*time.Second, width)
		if len(l) >= width {
			t.Errorf("width %d: %d columns: %q", width, len(l), l)
		}
		if !strings.Contains(l, "42%") {
			t.Errorf("width %d: no percentage: %q", width, l)
		}
	}
	if l := p.line(42<<20, 2*time.Second, 120); !strings.Contains(l, "[") || !strings.Contains(l, "42.0 MiB / 100.0 MiB") || !strings.Contains(l, "ETA 0:03") {
		t.Errorf("wide line: %q", l)
	}
	if l := p.line(100<<20, 3*time.Second, 120); !strings.Contains(l, "committing") {
		t.Errorf("all read: %q", l)
	}
	stream := &progress{label: "put b/k", total: -1}
	if l := stream.line(3<<20, time.Second, 80); !strings.Contains(l, "3.0 MiB") || strings.Contains(l, "%") {
		t.Errorf("unknown size: %q", l)
	}
	// A nil progress counts nothing and passes data through.
	var np *progress
	var buf bytes.Buffer
	io.Copy(np.writer(&buf), np.reader(strings.NewReader("abc")))
	np.done()
	if buf.String() != "abc" {
		t.Errorf("nil progress: %q", buf.String())
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 100 << 20: "100.0 MiB", 5 << 40: "5.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCompletionCommand(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		out, _, err := run(t, "completion", shell)
		if err != nil || !strings.Contains(out, "osprey") {
			t.Errorf("completion %s: %v, %d bytes", shell, err, len(out))
		}
	}
}

// TestStatusSeedsWithAuth: status --seeds on a cluster with auth on
// probes each OSD with the command's keyring, so every OSD answers.
func TestStatusSeedsWithAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 2, Replicas: 2, PGs: 8, WithMon: true, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	out, _, err := run(t, "status", "--json", "--seeds", strings.Join(lc.Seeds(), ","), "--keyring", lc.KeyringPath("client.admin"))
	if err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, o := range rep.OSDs {
		if !o.Up {
			t.Errorf("osd.%d does not answer the probe: %s", o.ID, o.Error)
		}
	}
	if rep.Health != "HEALTH_OK" {
		t.Errorf("health %s, want HEALTH_OK: %+v", rep.Health, rep)
	}
}

// TestBenchObjSeedsWithAuth: bench obj --seeds on a cluster with auth on
// runs as the keyring's entity, and cleans up after itself; without a
// keyring it is refused, and says why.
func TestBenchObjSeedsWithAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 2, Replicas: 2, PGs: 8, WithMon: true, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	seeds := strings.Join(lc.Seeds(), ",")
	args := []string{"bench", "obj", "--seeds", seeds, "--size", "4KiB", "--op", "put,get", "--concurrency", "2",
		"--objects", "4", "--duration", "100ms", "--json", "--bucket", "authbench"}
	out, _, err := run(t, append(args, "--keyring", lc.KeyringPath("client.admin"))...)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, `"op":`); n != 2 {
		t.Fatalf("%d rows, want put and get:\n%s", n, out)
	}
	if n := strings.Count(out, `"cpu_scope":"client"`); n != 2 {
		t.Fatalf("%d rows say their CPU is the client's only, want both:\n%s", n, out)
	}
	cl, err := client.New(t.Context(), client.Options{Seeds: lc.Seeds(), Keyring: lc.AdminKeyring})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if ok, err := cl.BucketExists(t.Context(), "authbench"); err != nil || ok {
		t.Fatalf("the run's bucket after it: exists %v, %v; want removed", ok, err)
	}
	// Interrupted mid-row (Ctrl-C ends the command's context), the run
	// still deletes what it wrote, and says so.
	ctx, cancel := context.WithCancel(t.Context())
	root := newRootCmd()
	var stderr bytes.Buffer
	root.SetOut(io.Discard)
	root.SetErr(&stderr)
	root.SetArgs([]string{"bench", "obj", "--seeds", seeds, "--keyring", lc.KeyringPath("client.admin"), "--size", "4KiB",
		"--op", "put", "--concurrency", "2", "--duration", "1m", "--bucket", "intrbench"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	osdtest.Eventually(t, 30*time.Second, "the interrupted run's first objects", func() bool {
		for _, err := range cl.ListObjects(t.Context(), "intrbench", client.ListOptions{}) {
			return err == nil
		}
		return false
	})
	cancel()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("an interrupted bench obj did not return")
	}
	if ok, err := cl.BucketExists(t.Context(), "intrbench"); err != nil || ok {
		t.Fatalf("an interrupted run's bucket after it: exists %v, %v; want removed (the run's error: %v; stderr: %s)", ok, err, runErr, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted: deleting the benchmark's objects") {
		t.Errorf("an interrupted run did not say it deletes its objects: %s", stderr.String())
	}
	_, _, err = run(t, append(args, "--keyring", "none")...)
	if err == nil || !strings.Contains(errorLine(err), "keyring") {
		t.Fatalf("without a keyring: %v; want the refusal, naming the keyring", err)
	}
	_, _, err = run(t, "bench", "obj", "--keyring", "k", "--duration", "100ms")
	if exitCode(err) != exitUsage {
		t.Fatalf("--keyring without --seeds: %v (exit %d), want a usage error", err, exitCode(err))
	}
}

// TestStatusSeedsMinSizeAsMon: status through the OSDs (--seeds) reports
// the pool's effective min_size, as the mon's status does, not the map's
// field, which is 0 for "the default" (placement.MinSize).
func TestStatusSeedsMinSizeAsMon(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 3, Replicas: 3, PGs: 8, WithMon: true, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	keyring := lc.KeyringPath("client.admin")
	out, _, err := run(t, "status", "--json", "--mon", lc.Mon.Addr(), "--keyring", keyring)
	if err != nil {
		t.Fatal(err)
	}
	var ms mon.Status
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(ms.Pools) != 1 || ms.Pools[0].MinSize != 2 {
		t.Fatalf("the mon's pools %+v, want one of min_size 2 (size 3)", ms.Pools)
	}
	// Every daemon runs this test's build: `osprey versions` counts them.
	out, _, err = run(t, "versions", "--mon", lc.Mon.Addr(), "--keyring", keyring)
	if err != nil {
		t.Fatal(err)
	}
	var versions map[string]map[string]int
	if err := json.Unmarshal([]byte(out), &versions); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	v := buildinfo.Version()
	if want := map[string]map[string]int{"mon": {v: 1}, "osd": {v: 3}, "overall": {v: 4}}; fmt.Sprint(versions) != fmt.Sprint(want) {
		t.Fatalf("osprey versions: %s, want %v", out, want)
	}
	seeds := strings.Join(lc.Seeds(), ",")
	out, _, err = run(t, "status", "--json", "--seeds", seeds, "--keyring", keyring)
	if err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Pools) != 1 || int(rep.Pools[0].MinSize) != ms.Pools[0].MinSize {
		t.Errorf("status --seeds pools %+v, want min_size %d as the mon says", rep.Pools, ms.Pools[0].MinSize)
	}
	text, _, err := run(t, "status", "--seeds", seeds, "--keyring", keyring)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^  \d+\s+\S+\s+3\s+2\s+8\s`).MatchString(text) {
		t.Errorf("status --seeds text lacks the pool row with SIZE 3, MIN_SIZE 2, PGS 8:\n%s", text)
	}
}

// TestStatusOSDDown stops one OSD of three and wants status to see it
// down and derive the PG states from the acting sets.
func TestStatusOSDDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 3, Replicas: 2, PGs: 32,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	seeds := strings.Join(lc.Seeds(), ",")

	out, _, err := run(t, "status", "--json", "--seeds", seeds)
	if err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Health != "HEALTH_OK" || rep.Pools[0].PGStates[pgActiveClean] != 32 || rep.FSID != lc.Map.FSID() {
		t.Errorf("all up: %+v", rep)
	}

	if err := lc.OSDs[2].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "status", "--json", "--seeds", seeds, "--timeout", "1s")
	if err != nil {
		t.Fatal(err)
	}
	rep = statusReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Health != "HEALTH_WARN" || rep.OSDs[2].Up || !rep.OSDs[0].Up || !rep.OSDs[1].Up {
		t.Errorf("osd.2 stopped: %+v", rep)
	}
	// Exactly the PGs whose primary is osd.2 are down, those where it
	// is a replica degraded, and the rest clean.
	want := map[string]int{}
	for pg := range uint32(32) {
		set := lc.Map.ActingSet(placement.DefaultPoolID, pg)
		switch {
		case set[0] == 2:
			want[pgDown]++
		case set[1] == 2:
			want[pgDegraded]++
		default:
			want[pgActiveClean]++
		}
	}
	if got := rep.Pools[0].PGStates; !maps.Equal(got, want) {
		t.Errorf("PG states %v, want %v", got, want)
	}
	text, _, err := run(t, "status", "--seeds", seeds, "--timeout", "1s")
	if err != nil || !strings.Contains(text, "HEALTH_WARN: 1 of 3 OSDs do not answer") || !strings.Contains(text, "down") {
		t.Errorf("text status: %v\n%s", err, text)
	}
}

// TestPositiveFlagsRefuseZero: every flag marked positive (markPositive)
// refuses 0 as a usage error instead of running with its default. The
// walk finds them all; each command's entry gives the arguments it needs
// to get as far as its flags' check.
func TestPositiveFlagsRefuseZero(t *testing.T) {
	t.Chdir(t.TempDir())
	argsOf := map[string][]string{
		"bench msgr": nil, "bench obj": nil, "up": nil, "mon": {"--embed-etcd", "etcd"},
		"put": {"file", "b/k"}, "cp": {"file", "b/k"}, "sync": {".", "osprey://b"},
		"rm": {"-r", "b/p"}, "rb": {"--force", "b"},
	}
	var checked int
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if _, ok := f.Annotations[positiveAnnotation]; !ok {
				return
			}
			path := strings.Join(strings.Fields(c.CommandPath())[1:], " ")
			pre, ok := argsOf[path]
			if !ok {
				t.Errorf("--%s of osprey %s is marked positive, but this test has no arguments for the command", f.Name, path)
				return
			}
			zero := "0"
			if f.Value.Type() == "duration" {
				zero = "0s"
			}
			args := append(append(strings.Fields(path), pre...), "--"+f.Name, zero)
			// Bounded: a command that took the 0 would start a cluster
			// and serve.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			root := newRootCmd()
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			root.SetArgs(args)
			err := root.ExecuteContext(ctx)
			if exitCode(err) != exitUsage || !strings.Contains(errorLine(err), "--"+f.Name+" ") || !strings.Contains(errorLine(err), "must be positive") {
				t.Errorf("osprey %s: %v (exit %d), want a usage error naming --%s", strings.Join(args, " "), err, exitCode(err), f.Name)
			}
			checked++
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if checked < 12 {
		t.Fatalf("checked %d positive flags, want the 12 or more there are", checked)
	}
	if _, _, err := run(t, "bench", "msgr", "--log-level", "bogus"); exitCode(err) != exitUsage {
		t.Errorf("--log-level bogus: %v (exit %d), want a usage error", err, exitCode(err))
	}
}

// TestMinInRatioZeroIsNoFloor: --min-in-ratio 0 means no floor, as Ceph's
// mon_osd_min_in_ratio = 0 does, not the mon's default (0.75); a ratio
// outside [0, 1] is a usage error.
func TestMinInRatioZeroIsNoFloor(t *testing.T) {
	if r, err := minInRatio(0); err != nil || r >= 0 {
		t.Fatalf("--min-in-ratio 0: %v %v, want no floor (negative)", r, err)
	}
	if r, err := minInRatio(0.6); err != nil || r != 0.6 {
		t.Fatalf("--min-in-ratio 0.6: %v %v", r, err)
	}
	for _, bad := range []float64{-0.5, 1.5, math.NaN()} {
		if _, err := minInRatio(bad); exitCode(err) != exitUsage {
			t.Errorf("--min-in-ratio %v: %v, want a usage error", bad, err)
		}
	}
}

// TestDownOutIntervalZeroIsNever: --down-out-interval 0 means never, as
// Ceph's mon_osd_down_out_interval = 0 does, not the mon's default; a
// negative one is a usage error.
func TestDownOutIntervalZeroIsNever(t *testing.T) {
	if d, err := downOutInterval(0); err != nil || d != mon.NeverOut {
		t.Fatalf("--down-out-interval 0: %v %v, want mon.NeverOut", d, err)
	}
	if d, err := downOutInterval(time.Minute); err != nil || d != time.Minute {
		t.Fatalf("--down-out-interval 1m: %v %v", d, err)
	}
	for _, args := range [][]string{
		{"mon", "--embed-etcd", t.TempDir(), "--down-out-interval", "-1s"},
		{"up", "--dir", t.TempDir(), "--down-out-interval", "-1s"},
	} {
		if _, _, err := run(t, args...); exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "--down-out-interval") {
			t.Errorf("osprey %v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

// TestParseOSDIDs: "3" and "osd.3" name one OSD, which a command asks
// about once however often it is named.
func TestParseOSDIDs(t *testing.T) {
	got, err := parseOSDIDs([]string{"osd.1", "2", "1", "osd.2", "0"})
	if err != nil || !slices.Equal(got, []uint32{1, 2, 0}) {
		t.Errorf("parseOSDIDs = %v, %v; want [1 2 0]", got, err)
	}
	for _, bad := range []string{"osd.", "x", "-1", "4294967296", "osd.1.2"} {
		if _, err := parseOSDIDs([]string{bad}); exitCode(err) != exitUsage {
			t.Errorf("parseOSDIDs(%q): %v, want a usage error", bad, err)
		}
	}
}

// TestPrintable: text output writes keys' control and other non-printing
// characters, and bytes that are not UTF-8, as escapes, so that a key can
// neither split a listing's line nor drive the terminal; the rest stays.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"photos/2024/a b.jpg": "photos/2024/a b.jpg",
		"héllo wörld ✓":       "héllo wörld ✓",
		"会議\u3000資料.pdf":      "会議\u3000資料.pdf",    // an ideographic space stays
		"a\u00a0b 👨\u200d👩":   "a\u00a0b 👨\u200d👩", // so do no-break spaces and joiners
		`back\slash`:          `back\slash`,        // alone, nothing to tell it from
		"a\nb":                `a\nb`,
		"tab\there":           `tab\there`,
		"\x1b[31mred\x1b[0m":  `\x1b[31mred\x1b[0m`,
		"bad\xffbyte":         `bad\xffbyte`,
		"c1\u0085del\x7f":     `c1\u0085del\x7f`,
		"txt.\u202eexe":       `txt.\u202eexe`, // a bidi override
		"line\u2028sep":       `line\u2028sep`,
		"a\\n\nb":             `a\\n\nb`, // a backslash beside an escape is escaped
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}

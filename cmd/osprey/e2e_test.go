package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/internal/logbuf"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/transports"
)

// TestEndToEnd builds the osprey binary and uses it as a person would:
// `osprey up` in the background, the object commands against it from
// separate processes, its exit codes and --json output, Ctrl-C, and a
// restart on the same directory that must find the data again.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a cluster; skipped with -short")
	}
	bin := buildCLI(t)
	work := t.TempDir()
	data := filepath.Join(work, "data")
	base := freePortRange(t, 6)

	// How full the host's disk is plays no part: the OSDs' failsafe here,
	// the map's ratios by command below.
	hostDisk := []string{"--failsafe-full-ratio", fmt.Sprint(osdtest.IgnoreHostDisk)}
	up := startUp(t, bin, data, base, hostDisk...)
	if len(up.seeds) != 3 || up.seeds[0] != fmt.Sprintf("tcp://127.0.0.1:%d", base) {
		t.Fatalf("up serves at %v, want 3 OSDs from port %d", up.seeds, base)
	}
	if up.mon == "" {
		t.Fatal("osprey up names no mon")
	}
	// The commands find the cluster through its mon, as `osprey up` tells
	// users to (OSPREY_MON); the seeds are there to show they lose.
	// The keyring is client.admin's, which up wrote and names.
	cli := &cliRunner{t: t, bin: bin, dir: work, env: []string{envMon + "=" + up.mon, envSeeds + "=tcp://127.0.0.1:1", envKeyring + "=" + up.keyring}}
	cli.ignoreHostDisk()

	// Files of the sizes the issue asks for, incompressible.
	sizes := map[string]int{"empty": 0, "one": 1, "1m": 1 << 20, "10m": 10 << 20, "100m": 100 << 20}
	files := map[string][]byte{}
	rng := rand.NewChaCha8([32]byte{1})
	for name, n := range sizes {
		b := make([]byte, n)
		rng.Read(b)
		files[name] = b
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cli.ok("mb", "e2e")
	cli.expect(1, "BucketAlreadyExists", "mb", "e2e")
	cli.ok("mb", "-p", "e2e")
	for name := range sizes {
		out := cli.ok("put", name, "e2e/files/"+name)
		if !strings.Contains(out, "upload: "+name+" to osprey://e2e/files/"+name) {
			t.Errorf("put %s printed %q", name, out)
		}
	}
	cli.stdin = bytes.NewReader(files["1m"])
	cli.ok("put", "-", "e2e/stdin/1m")
	cli.ok("cp", "10m", "osprey://e2e/cp/")
	cli.ok("cp", "osprey://e2e/files/1m", "osprey://e2e/copied", "--meta", "color=blue")

	// ls: one level with PRE lines, then recursive, then --json.
	out := cli.ok("ls", "e2e")
	for _, want := range []string{"PRE files/", "PRE stdin/", "PRE cp/", "copied"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls e2e lacks %q:\n%s", want, out)
		}
	}
	out = cli.ok("ls", "--recursive", "e2e/files/")
	for name, n := range sizes {
		if !strings.Contains(out, fmt.Sprintf("%d files/%s\n", n, name)) {
			t.Errorf("ls -r lacks files/%s of %d bytes:\n%s", name, n, out)
		}
	}
	lines := cli.jsonLines("ls", "--json", "-r", "e2e")
	if len(lines) != len(sizes)+3 {
		t.Errorf("ls --json -r: %d objects, want %d", len(lines), len(sizes)+3)
	}
	for _, l := range lines {
		if l["bucket"] != "e2e" || l["key"] == nil || l["size"] == nil || l["etag"] == nil {
			t.Errorf("ls --json line %v lacks bucket, key, size or etag", l)
		}
	}
	if b := cli.jsonLines("ls", "--json"); len(b) != 1 || b[0]["bucket"] != "e2e" {
		t.Errorf("ls --json of buckets: %v", b)
	}

	// get, to files and to stdout, byte for byte.
	for name, want := range files {
		dst := filepath.Join(work, "got-"+name)
		cli.ok("get", "e2e/files/"+name, dst)
		if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, want) {
			t.Errorf("get e2e/files/%s: %d bytes (err %v), differ from the %d put", name, len(got), err, len(want))
		}
	}
	if got := cli.ok("get", "osprey://e2e/stdin/1m", "-"); got != string(files["1m"]) {
		t.Errorf("get to stdout: %d bytes, differ from the %d put", len(got), len(files["1m"]))
	}
	cli.ok("cp", "osprey://e2e/cp/10m", work+"/")
	if got, _ := os.ReadFile(filepath.Join(work, "10m")); !bytes.Equal(got, files["10m"]) {
		t.Error("cp to a directory: the bytes differ")
	}

	// stat, text and JSON.
	out = cli.ok("stat", "e2e/copied")
	for _, want := range []string{"osprey://e2e/copied", "1048576 bytes", "color=blue"} {
		if !strings.Contains(out, want) {
			t.Errorf("stat lacks %q:\n%s", want, out)
		}
	}
	// --meta: repeatable, CSV (a quoted pair holds a comma), keys
	// lower-cased as S3 keeps them; a line break, a key no HTTP header
	// could carry, or two keys that differ in case only are refused.
	cli.ok("put", "one", "e2e/meta", "--meta", `Color=Red,"note=a,b"`, "--meta", "x=1", "--meta", `desc=hello, "world"`)
	if st := cli.jsonLines("stat", "--json", "e2e/meta"); len(st) != 1 ||
		!reflect.DeepEqual(st[0]["metadata"], map[string]any{"color": "Red", "note": "a,b", "x": "1", "desc": `hello, "world"`}) {
		t.Errorf("stat --json of a put with --meta: %v", st)
	}
	cli.expect(exitUsage, "line break", "put", "one", "e2e/meta2", "--meta", "nl=a\nb,empty=")
	cli.expect(exitError, "not an HTTP header name", "put", "one", "e2e/meta2", "--meta", "my key=1")
	cli.expect(exitError, "differ in case only", "put", "one", "e2e/meta2", "--meta", "a=1,A=2")
	cli.expect(exitError, "names a header the S3 gateway keeps", "put", "one", "e2e/meta2", "--meta", ":content-length=5")
	// A multipart object's CRC32C is its bytes', combined from its parts'.
	st := cli.jsonLines("stat", "--json", "e2e/files/100m")
	crc := fmt.Sprintf("%08x", crc32.Checksum(files["100m"], crc32.MakeTable(crc32.Castagnoli)))
	if len(st) != 1 || st[0]["size"] != float64(100<<20) || st[0]["crc32c"] != crc {
		t.Errorf("stat --json: %v, want size %d and crc32c %s", st, 100<<20, crc)
	}
	// Through the mon, status is its `ceph -s` view. The OSDs heard of
	// the ratios ignoreHostDisk set within a beacon or two: wait for that.
	var status []map[string]any
	for deadline := time.Now().Add(20 * time.Second); ; {
		status = cli.jsonLines("status", "--json")
		if len(status) != 1 {
			t.Fatalf("status --json: %v", status)
		}
		if health, _ := status[0]["health"].(map[string]any); health["status"] == "HEALTH_OK" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	health, _ := status[0]["health"].(map[string]any)
	osds, _ := status[0]["osds"].(map[string]any)
	if health["status"] != "HEALTH_OK" || osds["up"] != float64(3) || status[0]["pg_total"] != float64(128) {
		t.Errorf("status --json: %v%s", status, osdtest.HostDiskNote(data))
	}

	// Exit codes and error lines.
	cli.expect(3, "osprey: NoSuchKey: osprey://e2e/nope\n", "get", "e2e/nope", filepath.Join(work, "nope"))
	if _, err := os.Stat(filepath.Join(work, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed get left a file behind: %v", err)
	}
	cli.expect(3, "osprey: NoSuchKey: ", "stat", "e2e/nope")
	cli.expect(3, "osprey: NoSuchBucket: ", "ls", "nobucket")
	cli.expect(3, "osprey: NoSuchBucket: ", "put", "one", "nobucket/one")
	cli.expect(1, "osprey: BucketNotEmpty: ", "rb", "e2e")
	cli.expect(2, "osprey: ", "get")
	cli.expect(2, "osprey: unknown flag", "ls", "--nope")
	cli.expect(2, "neither is an object", "cp", "a", "b")
	cli.expect(2, "--part-size", "put", "one", "e2e/x", "--part-size", "1MiB")
	cli.expect(2, "--mode", "bench", "msgr", "--mode", "bogus")
	if v := cli.ok("--version"); !strings.HasPrefix(v, "osprey ") || !strings.Contains(v, runtime.Version()) {
		t.Errorf("osprey --version: %q", v)
	}
	cli.expect(1, "no such file", "put", filepath.Join(work, "missing"), "e2e/x")
	dead := freePortRange(t, 1)
	cli.expect(4, "cannot reach the cluster", "ls", "--seeds", fmt.Sprintf("127.0.0.1:%d", dead))

	// rm of some, then Ctrl-C: up must stop cleanly and exit 0.
	cli.ok("rm", "e2e/files/one", "e2e/files/empty")
	cli.expect(3, "NoSuchKey", "stat", "e2e/files/one")
	up.interrupt(t)

	// A restart on the same directory serves the same objects.
	up = startUp(t, bin, data, base, hostDisk...)
	if !up.reused {
		t.Error("the restart made a new cluster instead of reusing the map")
	}
	cli.env[0] = envMon + "=" + up.mon
	cli.ok("get", "e2e/files/10m", filepath.Join(work, "again"))
	if got, _ := os.ReadFile(filepath.Join(work, "again")); !bytes.Equal(got, files["10m"]) {
		t.Error("after a restart the object's bytes differ")
	}
	out = cli.ok("rm", "--recursive", "e2e/files/")
	if n := strings.Count(out, "delete: "); n != 3 {
		t.Errorf("rm --recursive deleted %d objects, want 3:\n%s", n, out)
	}
	cli.ok("rb", "--force", "e2e")
	cli.expect(3, "NoSuchBucket", "stat", "e2e")
	if out := cli.ok("ls"); out != "" {
		t.Errorf("ls after rb: %q", out)
	}
	up.interrupt(t)
}

// TestEndToEndRDMA runs the demo from the binary with both networks on
// RDMA (libfabric's tcp provider: RDMA semantics, no NIC), in a build
// with -tags rdma; without the tag it checks that up explains how to get
// RDMA rather than failing obscurely.
func TestEndToEndRDMA(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a cluster; skipped with -short")
	}
	bin := buildCLI(t)
	cli := &cliRunner{t: t, bin: bin, dir: t.TempDir()}
	if !transports.RDMABuilt {
		cli.expect(1, "-tags rdma", "up", "--temp", "--transport", "rdma+tcp")
		return
	}
	out := cli.ok("up", "--demo", "--temp", "--transport", "rdma+tcp", "--demo-sizes", "1KiB,20MiB", "--log-level", "warn")
	for _, want := range []string{"public rdma+tcp://", "cluster rdma+tcp://", "demo passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// The binary is built once per test run, by the first test that needs
// it, and removed by TestMain.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildCLI builds this package's binary with the test binary's build
// tags, so both exercise the same transports.
func buildCLI(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "osprey-e2e-"); built.err != nil {
			return
		}
		built.path, built.err = osdtest.BuildOsprey(built.dir)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// freePortRange finds n consecutive free loopback ports, below the
// ephemeral range (freeport.Range), so that no outgoing connection of a
// test running beside this one takes one before osprey up listens.
// Another process could still take them; the test then fails loudly
// rather than flakily passing.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	base, err := freeport.Range("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// upProcess is a running `osprey up --json`.
type upProcess struct {
	cmd     *exec.Cmd
	events  chan map[string]any // its stdout, one JSON event per line
	stderr  *syncBuffer
	exited  chan struct{} // closed once Wait returned waitErr
	wait    error
	seeds   []string
	mon     string
	keyring string // client.admin's
	reused  bool
	s3      map[string]any    // the S3 gateway's endpoint and keys
	metrics map[string]string // daemon ("mon.a", "osd.0", "s3") to its /metrics URL
}

// startUp starts `osprey up` and waits, with a deadline, for its
// "serving" event.
func startUp(t *testing.T, bin, dir string, port int, extra ...string) *upProcess {
	t.Helper()
	u := &upProcess{events: make(chan map[string]any, 16), stderr: &syncBuffer{}, exited: make(chan struct{})}
	u.cmd = exec.Command(bin, append([]string{"up", "--dir", dir, "--port", fmt.Sprint(port), "--json", "--log-level", "warn"}, extra...)...)
	u.cmd.Stderr = u.stderr
	stdout, err := u.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				u.events <- ev
			}
		}
		close(u.events)
		u.wait = u.cmd.Wait()
		close(u.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-u.exited:
		default:
			u.cmd.Process.Kill()
			<-u.exited
		}
		if t.Failed() {
			t.Logf("osprey up stderr:\n%s", u.stderr)
		}
	})
	ev := u.next(t, 60*time.Second)
	if ev["event"] != "serving" {
		t.Fatalf("osprey up's first event: %v, want serving", ev)
	}
	for _, s := range ev["seeds"].([]any) {
		u.seeds = append(u.seeds, s.(string))
	}
	u.reused, _ = ev["reused"].(bool)
	u.mon, _ = ev["mon"].(string)
	u.keyring, _ = ev["keyring"].(string)
	u.s3, _ = ev["s3"].(map[string]any)
	u.metrics = map[string]string{}
	for _, m := range ev["metrics"].([]any) {
		m := m.(map[string]any)
		u.metrics[m["daemon"].(string)], _ = m["url"].(string)
	}
	return u
}

func (u *upProcess) next(t *testing.T, within time.Duration) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-u.events:
		if !ok {
			<-u.exited
			t.Fatalf("osprey up exited: %v\n%s", u.wait, u.stderr)
		}
		return ev
	case <-time.After(within):
		t.Fatalf("osprey up printed no event within %v\n%s", within, u.stderr)
	}
	return nil
}

// interrupt sends SIGINT, as Ctrl-C does, and wants a "stopped" event and
// exit status 0.
func (u *upProcess) interrupt(t *testing.T) {
	t.Helper()
	if err := u.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if ev := u.next(t, 60*time.Second); ev["event"] != "stopped" {
		t.Errorf("after SIGINT osprey up printed %v, want stopped", ev)
	}
	select {
	case <-u.exited:
		if u.wait != nil {
			t.Fatalf("osprey up after SIGINT: %v\n%s", u.wait, u.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("osprey up did not exit within 60s of SIGINT")
	}
}

// syncBuffer is up's stderr: the exec package writes it while a failing
// test may read it.
type syncBuffer = logbuf.Buffer

// cliRunner runs the binary's one-shot commands.
type cliRunner struct {
	t     *testing.T
	bin   string
	dir   string
	env   []string
	stdin io.Reader // for the next command only
}

func (c *cliRunner) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdin, c.stdin = c.stdin, nil
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		c.t.Fatalf("osprey %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// ok runs a command that must succeed and returns its stdout.
func (c *cliRunner) ok(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("osprey %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// expect runs a command that must fail with exit code code and an error
// line on stderr ("osprey: ...", after any log lines) that contains want.
func (c *cliRunner) expect(code int, want string, args ...string) {
	c.t.Helper()
	_, errOut, got := c.run(args...)
	found := false
	for l := range strings.Lines(errOut) {
		found = found || strings.HasPrefix(l, "osprey: ") && strings.Contains(l, want)
	}
	if got != code || !found {
		c.t.Errorf("osprey %s: exit %d, stderr %q; want exit %d and an \"osprey: \" line with %q",
			strings.Join(args, " "), got, errOut, code, want)
	}
}

// jsonLines runs a command and parses its stdout as JSON lines.
// ignoreHostDisk sets the cluster's full ratios to osdtest.IgnoreHostDisk
// (full first: they must not decrease from nearfull to full), so that how
// full the host's disk is, where the OSDs keep their data, plays no part
// in the cluster's health. The map keeps them across restarts.
func (c *cliRunner) ignoreHostDisk() {
	c.t.Helper()
	for _, which := range []string{"full", "backfillfull", "nearfull"} {
		c.ok("osd", "set-"+which+"-ratio", fmt.Sprint(osdtest.IgnoreHostDisk))
	}
}

func (c *cliRunner) jsonLines(args ...string) []map[string]any {
	c.t.Helper()
	var out []map[string]any
	for l := range strings.Lines(c.ok(args...)) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			c.t.Fatalf("osprey %s: line %q is not a JSON object: %v", strings.Join(args, " "), l, err)
		}
		out = append(out, m)
	}
	return out
}

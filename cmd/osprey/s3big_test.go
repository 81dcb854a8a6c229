package main

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/dustin/go-humanize"
)

// gatewayProcess is a running `osprey s3`.
type gatewayProcess struct {
	cmd     *exec.Cmd
	addr    string // http://HOST:PORT
	metrics string // its /metrics URL, with --metrics-addr
	lines   chan string
	stderr  *syncBuffer
}

// startGateway starts `osprey s3` with args and waits, with a deadline,
// for the address it serves on (and its metrics', when args ask for
// them). It is killed when the test ends.
func startGateway(t *testing.T, bin string, args ...string) *gatewayProcess {
	t.Helper()
	g := &gatewayProcess{cmd: exec.Command(bin, append([]string{"s3"}, args...)...), lines: make(chan string, 4), stderr: &syncBuffer{}}
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.cmd.Stderr = g.stderr
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			g.lines <- sc.Text()
		}
		close(g.lines)
	}()
	var line string
	select {
	case line = <-g.lines:
	case <-time.After(60 * time.Second):
		t.Fatalf("osprey s3 printed nothing within 60s\n%s", g.stderr)
	}
	addr, ok := strings.CutPrefix(line, "osprey s3: serving S3 on ")
	if !ok {
		t.Fatalf("osprey s3 printed %q\n%s", line, g.stderr)
	}
	g.addr, _, _ = strings.Cut(addr, " ")
	if strings.Contains(strings.Join(args, " "), "--metrics-addr") {
		if g.metrics, ok = strings.CutPrefix(<-g.lines, "osprey s3: metrics on "); !ok {
			t.Errorf("osprey s3 --metrics-addr printed no address")
		}
	}
	return g
}

// TestS3BigPutRSS streams a large PUT through `osprey s3`, a process of
// its own, and GETs it back, while sampling the gateway's resident memory
// (VmRSS of /proc/PID/status, and VmHWM, the kernel's high-water mark, at
// the end): the gateway never holds a body whole, so its peak stays far
// below the object's size, whatever that is. The body is generated as it
// is sent, its MD5 and CRC32C taken on the way, and checked against the
// PUT's ETag and the GET's bytes and x-amz-checksum-crc32c.
//
// 1 GiB by default; OSPREY_S3_BIG sets the size ("5GiB": S3's largest
// single PUT).
func TestS3BigPutRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 1 GiB object through osprey up and osprey s3")
	}
	size := int64(1 << 30)
	if v := os.Getenv("OSPREY_S3_BIG"); v != "" {
		n, err := humanize.ParseBytes(v)
		if err != nil {
			t.Fatalf("OSPREY_S3_BIG=%q: %v", v, err)
		}
		size = int64(n)
	}
	// Well below any size this runs at: 64 MiB of send buffers (4 pieces of
	// 16 MiB), the GET's read windows, and the Go runtime's share.
	const bound = 256 << 20
	bin := buildCLI(t)
	// One OSD: the cluster's cost is not what is measured.
	up := startUp(t, bin, t.TempDir(), 0, "--osds", "1", "--pgs", "8")
	access, _ := up.s3["access_key"].(string)
	secret, _ := up.s3["secret_key"].(string)
	gw := startGateway(t, bin, "--mon", up.mon, "--keyring", up.keyring, "--listen", "127.0.0.1:0", "--log-level", "warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := s3Client(gw.addr, access, secret)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("big")}); err != nil {
		t.Fatal(err)
	}
	pid := gw.cmd.Process.Pid
	idle := procStatusKiB(t, pid, "VmRSS")

	var (
		mu   sync.Mutex
		peak int64
		stop = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if v, err := readProcStatus(pid, "VmRSS"); err == nil {
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
		}
	}()
	sign := func(req *http.Request) {
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: access, SecretAccessKey: secret}, req,
			"UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	url := gw.addr + "/big/obj"

	// The PUT: a body made as it goes, hashed as it goes.
	start := time.Now()
	sum, crc := md5.New(), crc32.New(crc32.MakeTable(crc32.Castagnoli))
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, io.TeeReader(newGenReader(size), io.MultiWriter(sum, crc)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	sign(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	putTime := time.Since(start)
	wantETag := `"` + hex.EncodeToString(sum.Sum(nil)) + `"`
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != wantETag {
		t.Fatalf("PUT of %s: %s, ETag %s (want the body's MD5 %s)\n%s\n%s", humanize.IBytes(uint64(size)), resp.Status,
			resp.Header.Get("ETag"), wantETag, msg, gw.stderr)
	}
	var c32 [4]byte
	binary.BigEndian.PutUint32(c32[:], crc.Sum32())
	wantCRC := base64.StdEncoding.EncodeToString(c32[:])

	// The GET, streamed into the same digests.
	mu.Lock()
	putPeak := peak
	peak = 0
	mu.Unlock()
	start = time.Now()
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Checksum-Mode", "ENABLED")
	sign(req)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sum.Reset()
	crc.Reset()
	n, err := io.Copy(io.MultiWriter(sum, crc), resp.Body)
	resp.Body.Close()
	getTime := time.Since(start)
	if err != nil || n != size || `"`+hex.EncodeToString(sum.Sum(nil))+`"` != wantETag || crc.Sum32() != binary.BigEndian.Uint32(c32[:]) ||
		resp.Header.Get("X-Amz-Checksum-Crc32c") != wantCRC {
		t.Fatalf("GET: %v, %d of %d bytes, MD5 %x (want %s), x-amz-checksum-crc32c %s (want %s)", err, n, size, sum.Sum(nil), wantETag,
			resp.Header.Get("X-Amz-Checksum-Crc32c"), wantCRC)
	}
	close(stop)
	<-done
	hwm := procStatusKiB(t, pid, "VmHWM")
	mu.Lock()
	getPeak := peak
	mu.Unlock()
	mib := func(kib int64) string { return fmt.Sprintf("%.0f MiB", float64(kib)/1024) }
	t.Logf("%s: PUT %.1fs (%.0f MiB/s), GET %.1fs (%.0f MiB/s); osprey s3's RSS: idle %s, sampled peak %s in the PUT, %s in the GET; VmHWM %s (bound %s)",
		humanize.IBytes(uint64(size)), putTime.Seconds(), float64(size)/(1<<20)/putTime.Seconds(), getTime.Seconds(),
		float64(size)/(1<<20)/getTime.Seconds(), mib(idle), mib(putPeak), mib(getPeak), mib(hwm), mib(bound>>10))
	if hwm<<10 > bound || hwm<<10 > size/2 {
		t.Fatalf("osprey s3's peak RSS %s for a %s object: above %s or half the object", mib(hwm), humanize.IBytes(uint64(size)), mib(bound>>10))
	}
}

// readProcStatus reads a "NAME: N kB" line of /proc/PID/status, in KiB.
func readProcStatus(pid int, name string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, name)
}

func procStatusKiB(t *testing.T, pid int, name string) int64 {
	t.Helper()
	v, err := readProcStatus(pid, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// genReader is n bytes of pseudo-random data made as they are read: a
// random 1 MiB block read from a different offset for each MiB, so a
// body of any size costs the test no memory.
type genReader struct {
	block []byte
	off   int64
	n     int64
}

const genBlock = 1 << 20

func newGenReader(n int64) *genReader {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 2*genBlock)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return &genReader{block: b, n: n}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off == g.n {
		return 0, io.EOF
	}
	mib := g.off / genBlock
	in := g.off % genBlock
	start := (mib*7919)%genBlock + in // a different window of the block each MiB
	k := copy(p[:min(int64(len(p)), g.n-g.off, genBlock-in)], g.block[start:])
	g.off += int64(k)
	return k, nil
}

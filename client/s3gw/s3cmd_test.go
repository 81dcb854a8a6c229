package s3gw_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// lookTool finds a client program for a test, or skips the test; where
// the env variable require is set (`make test` sets it: the deps target
// installs the Debian package pkg), a missing tool fails it instead.
func lookTool(t *testing.T, name, require, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(require) != "" {
			t.Fatalf("%s is set but %s is not on PATH: %v (apt-get install %s)", require, name, err, pkg)
		}
		t.Skipf("%s is not on PATH (apt-get install %s, or set %s=1 to make this a failure)", name, pkg, require)
	}
	return path
}

// cliRunner runs prog with pre and then the args given, env added to the
// test's environment: try gives its output and error, run fails the test
// on an error.
func cliRunner(t *testing.T, ctx context.Context, prog string, pre []string, env ...string) (try func(...string) (string, error), run func(...string) string) {
	try = func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, prog, append(slices.Clone(pre), args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run = func(args ...string) string {
		t.Helper()
		out, err := try(args...)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(prog), strings.Join(args, " "), err, out)
		}
		return out
	}
	return try, run
}

// TestS3cmd drives the gateway with s3cmd, as a user would: mb, put (one
// PUT, and multipart in 5 MiB parts), ls, la, get, info, del, rb. s3cmd
// checks the MD5 of what it puts and gets against the ETag.
func TestS3cmd(t *testing.T) {
	s3cmd := lookTool(t, "s3cmd", "OSPREY_REQUIRE_S3CMD", "s3cmd")
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	host := strings.TrimPrefix(e.url, "http://")
	// host_bucket without %(bucket)s: path-style requests.
	cfg := filepath.Join(dir, "s3cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\n"+
		"use_https = False\nbucket_location = us-east-1\nsignature_v2 = False\nmultipart_chunk_size_mb = 5\n",
		testAccess, testSecret, host, host), 0o600); err != nil {
		t.Fatal(err)
	}
	try, run := cliRunner(t, ctx, s3cmd, []string{"--config", cfg}, "HOME="+dir)

	small := osdtest.Payload(100<<10, 41)
	large := osdtest.Payload(12<<20+7, 42)
	for name, b := range map[string][]byte{"small.bin": small, "large.bin": large} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := try("put", filepath.Join(dir, "small.bin"), "s3://no-such-bucket/x"); err == nil || !strings.Contains(out, "NoSuchBucket") {
		t.Fatalf("s3cmd put into a missing bucket: %v: %s", err, out)
	}
	run("mb", "s3://cmd-bucket")
	if out := run("ls"); !strings.Contains(out, "s3://cmd-bucket") {
		t.Fatalf("s3cmd ls: %q", out)
	}
	run("put", filepath.Join(dir, "small.bin"), "s3://cmd-bucket/dir/small.bin")
	run("put", filepath.Join(dir, "large.bin"), "s3://cmd-bucket/dir/large.bin")
	// A multipart upload of 3 parts, as its ETag says.
	if h, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("cmd-bucket"), Key: aws.String("dir/large.bin")}); err != nil ||
		!strings.HasSuffix(*h.ETag, `-3"`) {
		t.Fatalf("s3cmd put of 12 MiB in 5 MiB parts: %v %v", err, h)
	}
	out := run("ls", "s3://cmd-bucket/")
	if !strings.Contains(out, "DIR") || !strings.Contains(out, "s3://cmd-bucket/dir/") {
		t.Fatalf("s3cmd ls of the bucket: %q", out)
	}
	out = run("ls", "--recursive", "s3://cmd-bucket")
	for _, want := range []string{"s3://cmd-bucket/dir/small.bin", "s3://cmd-bucket/dir/large.bin", fmt.Sprint(len(large))} {
		if !strings.Contains(out, want) {
			t.Fatalf("s3cmd ls --recursive: no %s in %q", want, out)
		}
	}
	if out := run("la"); !strings.Contains(out, "s3://cmd-bucket/dir/") {
		t.Fatalf("s3cmd la: %q", out)
	}
	if out := run("info", "s3://cmd-bucket/dir/small.bin"); !strings.Contains(out, md5hex(small)) {
		t.Fatalf("s3cmd info: no MD5 %s in %s", md5hex(small), out)
	}
	for name, want := range map[string][]byte{"small.bin": small, "large.bin": large} {
		dst := filepath.Join(dir, "back-"+name)
		run("get", "s3://cmd-bucket/dir/"+name, dst)
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s read back: %v, %d bytes, equal %v", name, err, len(got), bytes.Equal(got, want))
		}
	}
	run("del", "s3://cmd-bucket/dir/small.bin")
	run("del", "s3://cmd-bucket/dir/large.bin")
	if out := run("ls", "--recursive", "s3://cmd-bucket"); strings.Contains(out, "dir/") {
		t.Fatalf("after del: %q", out)
	}
	run("rb", "s3://cmd-bucket")
	if out := run("ls"); strings.Contains(out, "cmd-bucket") {
		t.Fatalf("after rb: %q", out)
	}
}

// TestBoto3 runs testdata/boto3_api.py, the API table of docs/s3.md with
// boto3 and presigned URLs, against the gateway. `make test` sets
// OSPREY_REQUIRE_BOTO3=1 (the deps target installs python3-boto3).
func TestBoto3(t *testing.T) {
	// The python3 on PATH, or Debian's, where python3-boto3 puts boto3
	// (PATH may lead to another Python, a pyenv one, without it).
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import boto3").Run() == nil {
			python = path
			break
		}
	}
	if python == "" {
		if os.Getenv("OSPREY_REQUIRE_BOTO3") != "" {
			t.Fatal("OSPREY_REQUIRE_BOTO3 is set but no python3 imports boto3 (apt-get install python3-boto3)")
		}
		t.Skip("no python3 imports boto3 (apt-get install python3-boto3, or set OSPREY_REQUIRE_BOTO3=1 to make this a failure)")
	}
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	script, err := filepath.Abs("testdata/boto3_api.py")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, python, script)
	cmd.Env = append(os.Environ(), "OSPREY_S3_ENDPOINT="+e.url, "OSPREY_S3_ACCESS_KEY="+testAccess, "OSPREY_S3_SECRET_KEY="+testSecret,
		"HOME="+dir, "AWS_CONFIG_FILE="+filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "none"),
		"AWS_EC2_METADATA_DISABLED=true")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok boto3") {
		t.Fatalf("boto3_api.py: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

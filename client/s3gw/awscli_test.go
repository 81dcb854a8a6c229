package s3gw_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestAWSCLI drives the gateway with the real aws command line tool, as a
// user would: mb, cp up and down, ls, rm --recursive, rb. With the CLI's
// defaults (AWS_CONFIG_FILE: a region only), 100 KiB goes in one PUT and
// 20 MiB by multipart upload in 8 MiB parts. `make test` sets
// OSPREY_REQUIRE_AWSCLI=1 (the deps target installs awscli), so there the
// test must run.
func TestAWSCLI(t *testing.T) {
	aws := lookTool(t, "aws", "OSPREY_REQUIRE_AWSCLI", "awscli")
	e := newEnv(t)
	// Each aws command starts a Python interpreter: seconds apiece on a
	// busy machine, a dozen of them here.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, []byte("[default]\nregion = us-east-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	try, run := cliRunner(t, ctx, aws, []string{"--endpoint-url", e.url}, "AWS_CONFIG_FILE="+cfg, "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "none"),
		"AWS_ACCESS_KEY_ID="+testAccess, "AWS_SECRET_ACCESS_KEY="+testSecret, "AWS_DEFAULT_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=", "HOME="+dir)

	small := osdtest.Payload(100<<10, 5)
	large := osdtest.Payload(20<<20+3, 6)
	for name, b := range map[string][]byte{"small.bin": small, "large.bin": large} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// An error reaches the user as S3's code (the CLI trips over an
	// error without a message).
	if out, err := try("s3", "cp", filepath.Join(dir, "small.bin"), "s3://no-such-bucket/x"); err == nil || !strings.Contains(out, "NoSuchBucket") {
		t.Fatalf("aws s3 cp into a missing bucket: %v: %s", err, out)
	}
	run("s3", "mb", "s3://cli-bucket")
	if out := run("s3", "ls"); !strings.Contains(out, "cli-bucket") {
		t.Fatalf("aws s3 ls: %q", out)
	}
	run("s3", "cp", filepath.Join(dir, "small.bin"), "s3://cli-bucket/dir/small.bin")
	run("s3", "cp", filepath.Join(dir, "large.bin"), "s3://cli-bucket/dir/sub/large.bin")
	run("s3", "cp", filepath.Join(dir, "small.bin"), "s3://cli-bucket/top.bin")
	// The CLI lists with encoding-type=url and decodes what it gets.
	run("s3", "cp", filepath.Join(dir, "small.bin"), "s3://cli-bucket/a b+c.bin")

	out := run("s3", "ls", "s3://cli-bucket/dir/")
	if !strings.Contains(out, "PRE sub/") || !strings.Contains(out, "102400 small.bin") {
		t.Fatalf("aws s3 ls dir/: %q", out)
	}
	out = run("s3", "ls", "--recursive", "s3://cli-bucket")
	for _, want := range []string{"dir/small.bin", "dir/sub/large.bin", "top.bin", " a b+c.bin\n", "20971523"} {
		if !strings.Contains(out, want) {
			t.Fatalf("aws s3 ls --recursive: no %s in %q", want, out)
		}
	}

	for _, c := range []struct {
		key  string
		want []byte
	}{{"dir/small.bin", small}, {"dir/sub/large.bin", large}} {
		dst := filepath.Join(dir, "back-"+filepath.Base(c.key))
		run("s3", "cp", "s3://cli-bucket/"+c.key, dst)
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("%s read back: %v, %d bytes, equal %v", c.key, err, len(got), bytes.Equal(got, c.want))
		}
	}
	// The ETag of a single put is the MD5 of the body, that of the
	// multipart one names its 3 parts: s3api shows them.
	if out := run("s3api", "head-object", "--bucket", "cli-bucket", "--key", "top.bin"); !strings.Contains(out, md5hex(small)) {
		t.Fatalf("head-object: no ETag %s in %s", md5hex(small), out)
	}
	if out := run("s3api", "head-object", "--bucket", "cli-bucket", "--key", "dir/sub/large.bin"); !strings.Contains(out, `-3\"`) {
		t.Fatalf("head-object of the multipart upload: %s", out)
	}

	out = run("s3", "rm", "--recursive", "s3://cli-bucket/dir/")
	if strings.Count(out, "delete: ") != 2 {
		t.Fatalf("aws s3 rm --recursive: %q", out)
	}
	if out := run("s3", "ls", "--recursive", "s3://cli-bucket"); strings.Contains(out, "dir/") || !strings.Contains(out, "top.bin") {
		t.Fatalf("after rm: %q", out)
	}
	run("s3", "rm", "s3://cli-bucket/top.bin")
	run("s3", "rm", "s3://cli-bucket/a b+c.bin")
	run("s3", "rb", "s3://cli-bucket")
	if out := run("s3", "ls"); strings.Contains(out, "cli-bucket") {
		t.Fatalf("after rb: %q", out)
	}
}

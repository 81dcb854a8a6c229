// Package browsertest drives pages in headless Chromium (Debian's chromium
// package) through chromedp, for tests of what a browser does with
// Osprey's HTTP: the mon's dashboard, a web page calling the S3 gateway
// across origins (CORS). Without Chromium the tests skip, unless
// OSPREY_REQUIRE_CHROMIUM is set (make test sets it): then a missing
// browser is a failure.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Page is one tab, with the console errors and exceptions it logged.
type Page struct {
	Ctx context.Context // chromedp's, to run actions of one's own
	mu  sync.Mutex
	bad []string // console errors, exceptions
}

// Chromium is the browser's path; it skips t (or fails it, under
// OSPREY_REQUIRE_CHROMIUM) when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("OSPREY_REQUIRE_CHROMIUM") != "" {
		t.Fatal("OSPREY_REQUIRE_CHROMIUM is set but chromium is not on PATH (apt-get install chromium)")
	}
	t.Skip("chromium is not on PATH (apt-get install chromium, or set OSPREY_REQUIRE_CHROMIUM=1 to make this a failure)")
	return ""
}

// Open starts a headless Chromium with a width x height viewport and
// loads url, recording from the first moment what the console says.
func Open(t testing.TB, url string, width, height int) *Page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(t)),
		// CI runs as root, where Chromium's sandbox cannot start.
		chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(width, height))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	p := &Page{Ctx: ctx}
	msgs := chromedp.Console(ctx) // subscribes now: nothing the page says is lost
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleException:
				p.mu.Lock()
				p.bad = append(p.bad, m.String())
				p.mu.Unlock()
			case chromedp.ConsoleWarning:
				t.Logf("console warning: %s", m)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		acancel()
		<-done
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height)), chromedp.Navigate(url)); err != nil {
		t.Fatalf("loading %s: %v", url, err)
	}
	return p
}

// Poll waits, within a deadline, until the JavaScript expression is true
// in the page.
func (p *Page) Poll(within time.Duration, expr string) error {
	_, err := chromedp.Run(p.Ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(50*time.Millisecond)))
	return err
}

// Eval is the string the JavaScript expression evaluates to.
func (p *Page) Eval(t testing.TB, expr string) string {
	t.Helper()
	s, err := chromedp.Run(p.Ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return s
}

// Console is what the page logged as errors or threw so far.
func (p *Page) Console() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bad...)
}

// CheckConsole fails t if the page logged an error or threw.
func (p *Page) CheckConsole(t testing.TB) {
	t.Helper()
	for _, m := range p.Console() {
		t.Errorf("console: %s", m)
	}
}

package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ospreystore/osprey/internal/browsertest"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// The browser tests load the page in headless Chromium through chromedp
// (internal/browsertest): without Chromium they skip, unless
// OSPREY_REQUIRE_CHROMIUM is set (make test sets it).

// browserPage is one tab on the dashboard.
type browserPage struct{ *browsertest.Page }

func openPage(t *testing.T, url string, width, height int) *browserPage {
	t.Helper()
	return &browserPage{browsertest.Open(t, url, width, height)}
}

// wait polls the JS expression in the page until it is true.
func (p *browserPage) wait(t *testing.T, within time.Duration, what, expr string) {
	t.Helper()
	if err := p.Poll(within, expr); err != nil {
		t.Fatalf("waiting %v for %s: %v; the page shows: %s%s", within, what, err, p.eval(t, `document.querySelector("header").innerText + " | " + document.getElementById("checks").innerText`), osdtest.HostDiskNote(os.TempDir()))
	}
}

func (p *browserPage) eval(t *testing.T, expr string) string { t.Helper(); return p.Eval(t, expr) }

// screenshot saves the whole page as DIR/name.png when
// OSPREY_DASHBOARD_SCREENSHOTS=DIR is set (how docs/img's pictures of the
// dashboard are made).
func (p *browserPage) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("OSPREY_DASHBOARD_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(p.Ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
}

// checkConsole fails the test if the page logged an error or threw.
func (p *browserPage) checkConsole(t *testing.T) { t.Helper(); p.CheckConsole(t) }

const healthIs = `document.getElementById("health").textContent === %q`

// TestBrowserLiveCluster loads the page on a real cluster: it shows
// HEALTH_OK and every OSD up with no console error; an OSD stopped shows
// down, with HEALTH_WARN, its reason and an event, within seconds; and
// all is well again once it is back.
func TestBrowserLiveCluster(t *testing.T) {
	c, s := startCluster(t, localOptions())
	p := openPage(t, s.URL(), 1280, 900)
	p.wait(t, 20*time.Second, "HEALTH_OK with 3 OSDs up",
		fmt.Sprintf(healthIs, "HEALTH_OK")+` && document.querySelectorAll('#osds tbody tr[data-up="true"]').length === 3`)
	if n := p.eval(t, `String(document.querySelectorAll("#chart polyline").length) + " " + document.querySelector("#pgs tbody").innerText`); n != "3 active+clean\t16" {
		t.Errorf("chart lines and PG states: %q", n)
	}
	// A click on an OSD's row shows its throughput; the button, the
	// cluster's again.
	if _, err := chromedp.Run(p.Ctx, chromedp.Click(chromedp.CSS("#osd-1 td.status"))); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 5*time.Second, "osd.1's graph", `document.getElementById("chart-title").textContent === "osd.1" && document.getElementById("osd-1").classList.contains("selected")`)
	if _, err := chromedp.Run(p.Ctx, chromedp.Click(chromedp.CSS("#chart-cluster"))); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 5*time.Second, "the cluster's graph", `document.getElementById("chart-title").textContent === "cluster" && document.getElementById("chart-cluster").hidden`)
	p.checkConsole(t)

	ctx := context.Background()
	id := c.OSDs[2].ID()
	if err := c.StopOSD(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 15*time.Second, fmt.Sprintf("osd.%d down and HEALTH_WARN", id),
		fmt.Sprintf(`document.getElementById("osd-%d")?.dataset.up === "false"`, id)+
			` && `+fmt.Sprintf(healthIs, "HEALTH_WARN")+
			` && document.getElementById("checks").innerText.includes("1 osds down")`+
			` && document.querySelector('#events li[data-kind="osd_down"]') !== null`)
	if st := p.eval(t, fmt.Sprintf(`document.querySelector("#osd-%d td.status").textContent`, id)); st != "down, in" {
		t.Errorf("osd.%d's status cell: %q", id, st)
	}
	p.screenshot(t, "dashboard-osd-down")

	if err := c.RestartOSD(ctx, 2); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 20*time.Second, "HEALTH_OK again with the OSD up",
		fmt.Sprintf(healthIs, "HEALTH_OK")+fmt.Sprintf(` && document.getElementById("osd-%d").dataset.up === "true"`, id)+
			` && document.getElementById("checks").children.length === 0`)
	p.checkConsole(t)
}

// TestBrowserHundredOSDs: on a mon holding 100 OSDs with long host names
// and IPv6 addresses the tree renders every row, and nothing reaches
// past the viewport's width, on a laptop screen or a narrow window.
func TestBrowserHundredOSDs(t *testing.T) {
	m := bigCluster(t, 100)
	s := serve(t, m)
	for _, w := range []int{1280, 800} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			p := openPage(t, s.URL(), w, 800)
			p.wait(t, 10*time.Second, "100 OSD rows", `document.querySelectorAll("#osds tbody tr").length === 100`)
			// Rendered, not just present: the last row has its host and
			// its capacity, and sits below the first.
			if got := p.eval(t, `document.querySelector("#osd-99").innerText.includes("storage-node-024") && document.querySelector("#osd-99 td.usage").textContent.includes("% of 4.0 TiB") ? "ok" : document.querySelector("#osd-99").innerText`); got != "ok" {
				t.Errorf("osd.99's row: %q", got)
			}
			overflow := p.eval(t, `(() => {
				const vw = document.documentElement.clientWidth, out = [];
				if (document.documentElement.scrollWidth > vw) out.push("page " + document.documentElement.scrollWidth + " > " + vw);
				for (const e of document.querySelectorAll("section, table, svg")) {
					const r = e.getBoundingClientRect();
					if (r.right > vw + 0.5) out.push((e.id || e.tagName) + " right " + r.right + " > " + vw);
				}
				return out.join("; ");
			})()`)
			if overflow != "" {
				t.Errorf("at %d px: %s", w, overflow)
			}
			p.screenshot(t, fmt.Sprintf("dashboard-100-osds-%d", w))
			p.checkConsole(t)
		})
	}
}

package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/bench"
)

// Progress bars for transfers. One bar is one line redrawn in place with
// "\r", so it only makes sense on a terminal: on a pipe or a file it would
// be noise in someone's log. It appears only once a transfer has taken
// progressDelay, so quick commands print nothing extra, as with curl and
// mc.
const (
	progressDelay  = 500 * time.Millisecond
	progressRedraw = 200 * time.Millisecond
)

// progress tracks one transfer. A nil *progress is valid and counts
// nothing: commands call it unconditionally.
type progress struct {
	w     io.Writer
	label string
	total int64 // -1 when unknown (stdin)
	n     atomic.Int64
	start time.Time

	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex // held while drawing, and by above
	drawn bool       // under mu: the bar is on the screen
}

// newProgress starts a bar on w if show, else returns nil.
func newProgress(w io.Writer, show bool, label string, total int64) *progress {
	if !show {
		return nil
	}
	p := &progress{w: w, label: label, total: total, start: time.Now(), stop: make(chan struct{})}
	p.wg.Go(p.run)
	return p
}

func (p *progress) run() {
	t := time.NewTimer(progressDelay)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.draw()
			t.Reset(progressRedraw)
		}
	}
}

// add counts n bytes moved.
func (p *progress) add(n int) {
	if p != nil {
		p.n.Add(int64(n))
	}
}

// done stops the bar and erases its line, so what the command prints next
// starts on a clean line.
func (p *progress) done() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawLocked()
}

func (p *progress) drawLocked() {
	p.drawn = true
	fmt.Fprint(p.w, "\r"+p.line(p.n.Load(), time.Since(p.start), termWidth())+"\033[K")
}

// above runs print, which writes whole lines to the terminal the bar is
// on, with the bar erased first and drawn again below them (a recursive
// job's result and error lines).
func (p *progress) above(print func()) {
	if p == nil {
		print()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.drawn {
		print()
		return
	}
	fmt.Fprint(p.w, "\r\033[K")
	print()
	p.drawLocked()
}

// line renders the bar for n bytes after elapsed in at most width columns:
//
//	upload osprey://b/big  42% [=======>          ] 42.0 MiB / 100.0 MiB  310.2 MB/s  ETA 0:01
//
// The label gives way first (its start is cut), then the bar, so the
// numbers always show.
func (p *progress) line(n int64, elapsed time.Duration, width int) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	var tail string
	switch {
	case p.total < 0:
		tail = fmt.Sprintf(" %s  %s  %s", humanBytes(n), bench.FormatRate(rate), clock(elapsed))
	case n >= p.total:
		// Everything has been read, but the SDK may still be sending
		// the last parts and waiting for every replica's sync.
		tail = fmt.Sprintf(" %s  %s  committing", humanBytes(p.total), clock(elapsed))
	default:
		eta := "--:--"
		if rate > 0 {
			eta = clock(time.Duration(float64(p.total-n) / rate * float64(time.Second)))
		}
		tail = fmt.Sprintf(" %s / %s  %s  ETA %s", humanBytes(n), humanBytes(p.total), bench.FormatRate(rate), eta)
	}
	mid := ""
	if p.total > 0 {
		pct := min(100, int(100*n/p.total))
		mid = fmt.Sprintf(" %3d%%", pct)
		room := width - 1 - len(tail) - len(mid) - 3 // " [" and "]"
		barW := min(40, room-min(len(p.label), 16))
		if barW >= 10 {
			filled := min(barW, int(int64(barW)*n/p.total))
			bar := strings.Repeat("=", filled)
			if filled < barW {
				bar += ">" + strings.Repeat(" ", barW-filled-1)
			}
			mid += " [" + bar + "]"
		}
	}
	label := p.label
	if room := width - 1 - len(mid) - len(tail); len(label) > room {
		if room < 4 {
			label = ""
		} else {
			label = "..." + label[len(label)-room+3:]
		}
	}
	s := label + mid + tail
	if len(s) > width-1 && width > 1 {
		s = s[:width-1] // never wrap: a wrapped line cannot be redrawn with \r
	}
	return s
}

// reader counts what r yields.
func (p *progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return &countingReader{r: r, p: p}
}

// writer counts what goes to w.
func (p *progress) writer(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return &countingWriter{w: w, p: p}
}

type countingReader struct {
	r io.Reader
	p *progress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.add(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	p *progress
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.add(n)
	return n, err
}

// isTerminal reports whether f is an interactive terminal, without a
// dependency on x/term: a character device that is not /dev/null (which
// is one too, and is where stderr points under many service managers).
// TERM=dumb (Emacs shells, some CI) cannot redraw a line, so it counts as
// no terminal.
func isTerminal(f *os.File) bool {
	if os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// termWidth is $COLUMNS when the shell exports it, else 80.
func termWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 20 {
		return n
	}
	return 80
}

// humanBytes writes n in IEC units with one decimal, as aws s3 ls
// --human-readable does: 0 B, 512 B, 1.5 KiB, 100.0 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// clock writes d as M:SS (or H:MM:SS).
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

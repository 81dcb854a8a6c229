package msgr

import "sync"

// dispatchQueue holds what a Conn received for its dispatcher, in order,
// and costs an idle session next to nothing: its ring starts small, grows
// with a burst and is dropped when a large one drains, and no goroutine
// waits on it. The first item queued while no one drains starts a
// goroutine, which dispatches until the queue is empty and then ends, so
// calls for one Conn are never concurrent and always in order.
//
// The Conn holds one count of the messenger's WaitGroup from its creation
// until its end marker (a zero item, queued by closeWith) is dispatched,
// which covers every draining goroutine: Shutdown waits for them.
type dispatchQueue struct {
	mu      sync.Mutex
	ring    []dispatchItem // a power of two long, or nil
	head, n int
	running bool // a goroutine drains the queue
	ended   bool // the end marker was dispatched: later items are dropped
}

const (
	dispatchRingMin  = 8
	dispatchRingKeep = 64 // a ring larger than this is dropped when it drains
)

// push queues it and reports whether the caller must start a goroutine to
// drain the queue. After the end, it reports false and the caller drops it.
func (q *dispatchQueue) push(it dispatchItem) (start, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return false, false
	}
	if q.n == len(q.ring) {
		ring := make([]dispatchItem, max(dispatchRingMin, 2*len(q.ring)))
		for i := range q.n {
			ring[i] = q.ring[(q.head+i)&(len(q.ring)-1)]
		}
		q.ring, q.head = ring, 0
	}
	q.ring[(q.head+q.n)&(len(q.ring)-1)] = it
	q.n++
	start = !q.running
	q.running = true
	return start, true
}

// pop takes the next item. When the queue is empty it reports false, and
// the draining goroutine must end: the next push starts another.
func (q *dispatchQueue) pop() (dispatchItem, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		q.running = false
		if len(q.ring) > dispatchRingKeep {
			q.ring, q.head = nil, 0
		}
		return dispatchItem{}, false
	}
	it := q.ring[q.head]
	q.ring[q.head] = dispatchItem{}
	q.head = (q.head + 1) & (len(q.ring) - 1)
	q.n--
	return it, true
}

// end marks the queue ended and returns what was queued after the end
// marker (readers that lost the race with the close), for the caller to
// release.
func (q *dispatchQueue) end() []dispatchItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ended, q.running = true, false
	rest := make([]dispatchItem, 0, q.n)
	for q.n > 0 {
		rest = append(rest, q.ring[q.head])
		q.ring[q.head] = dispatchItem{}
		q.head = (q.head + 1) & (len(q.ring) - 1)
		q.n--
	}
	q.ring = nil
	return rest
}

// pushItem queues an item for the dispatcher, starting a goroutine to
// deliver it if none runs; after the end marker, messages are released
// instead.
func (c *Conn) pushItem(it dispatchItem) {
	start, ok := c.dq.push(it)
	if !ok {
		if it.m != nil {
			it.m.Release()
		}
		return
	}
	if start {
		go c.drainFn()
	}
}

func (c *Conn) pushEvent(ev Event) { c.pushItem(dispatchItem{ev: &ev}) }

// drain delivers queued messages and events in order until the queue is
// empty, or until the end marker: then it drops what came after and gives
// back the Conn's count of the messenger's WaitGroup.
func (c *Conn) drain() {
	d := c.m.opts.Dispatcher
	for {
		it, ok := c.dq.pop()
		switch {
		case !ok:
			return
		case it.m != nil:
			d.Dispatch(it.m)
		case it.ev != nil:
			d.HandleEvent(*it.ev)
		default:
			for _, it := range c.dq.end() {
				if it.m != nil {
					it.m.Release()
				}
			}
			c.m.wg.Done()
			return
		}
	}
}

package msgr_test

import (
	"bytes"
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestKeepData: a dispatcher that keeps each message's data (KeepData) and
// releases the message gets the bytes where the link received them, not a
// copy, and they stay intact after the release; meanwhile the receiver's
// budget holds nothing, so kept data never stalls the sender. A message
// without data keeps nothing.
func TestKeepData(t *testing.T) {
	for _, env := range []msgrtest.Env{tcpEnv, {Scheme: "mem", Transports: memTransports()}} {
		t.Run(env.Scheme, func(t *testing.T) {
			type kept struct {
				buf       *wire.Buffer
				data      []byte
				inPlace   bool // data is where m.Data was
				wasNilBuf bool
			}
			got := make(chan kept, len(dataSizes)+1)
			srv := env.NewMessenger(t, "osd.0", msgr.DispatchFunc(func(m *msgr.Message) {
				buf, data := m.KeepData()
				k := kept{buf: buf, data: data, wasNilBuf: buf == nil}
				k.inPlace = len(data) > 0 && unsafe.SliceData(data) == unsafe.SliceData(m.Data)
				m.Release()
				got <- k
			}), nil)
			cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), nil)
			c, err := cli.Connect(context.Background(), env.Listen(t, srv), "osd.0")
			if err != nil {
				t.Fatal(err)
			}
			sizes := append([]int{0}, dataSizes...)
			var keep []kept
			for i, size := range sizes {
				if err := c.Send(context.Background(), msgr.NewMessage(1, []byte("front"), dataOf(size, i))); err != nil {
					t.Fatal(err)
				}
				select {
				case k := <-got:
					keep = append(keep, k)
				case <-time.After(30 * time.Second):
					t.Fatalf("message %d not delivered; %s", i, c)
				}
			}
			// Everything delivered is released: the budget is back in full
			// while all of the data is still kept.
			if in := srv.Stats().Recv.InFlight; in != 0 {
				t.Errorf("%d bytes of the receive budget held while only kept data remains", in)
			}
			for i, k := range keep {
				switch {
				case sizes[i] == 0:
					if !k.wasNilBuf || k.data != nil {
						t.Errorf("a message without data kept a buffer")
					}
					continue
				case !k.inPlace:
					t.Errorf("%d bytes: kept data is a copy, not the received bytes", sizes[i])
				case !bytes.Equal(k.data, dataOf(sizes[i], i)):
					t.Errorf("%d bytes: kept data differs after the message's release", sizes[i])
				}
				k.buf.Release()
			}
		})
	}
}

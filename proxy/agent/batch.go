package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Results posted together.
//
// A result is posted at once when no post is on its way. Results that finish
// while one is on its way wait for it, then go together in one CompleteBatch
// call, sent by the oldest of their callers: under load the batches grow by
// themselves, and a lone result costs nothing more than a Complete. Each
// result still gets its own answer (the automator records each as a
// Complete of its own), so deliver's retries and refusals are per result as
// before.

// BatchClient is implemented by a Client that can post several results in
// one call (the generated client does). Without it, each result is posted
// with Complete.
type BatchClient interface {
	CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, opts ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error)
}

const (
	// maxPostBatch is the most results one call carries (the automator's
	// bound).
	maxPostBatch = 256
	// maxPostBatchBytes bounds a batch's encoded results, well within the
	// automator's 8 MiB per message; a larger result goes alone.
	maxPostBatchBytes = 4 << 20
	// batchRetryAfter is how long results go one by one after the automator
	// answered that it has no CompleteBatch (an older version), before a
	// batch is tried again (it may have been upgraded).
	batchRetryAfter = 10 * time.Minute
)

// errNoBatch tells a result's caller to post it alone with Complete.
var errNoBatch = errors.New("the automator has no CompleteBatch")

// poster posts the results of one agent.
type poster struct {
	client Client
	batch  BatchClient // nil: Complete only

	mu      sync.Mutex
	queue   []*postOp // waiting, oldest first
	sending bool      // a caller is sending a batch
	// noBatchUntil: unix nanoseconds until which results go one by one.
	noBatchUntil atomic.Int64
}

// A waiting result's lifecycle, as a write's in the automator's SQLite
// store: queued until a sender takes it, or abandoned by a caller that gave
// up first (then it is not sent), or made the next sender.
const (
	postQueued int32 = iota
	postTaken
	postAbandoned
	postLeading
)

type postOp struct {
	ctx   context.Context
	req   *automatorv1.CompleteRequest
	size  int
	state atomic.Int32
	done  chan error    // capacity 1: the result's answer
	lead  chan struct{} // capacity 1: this caller sends the next batch
}

func newPoster(c Client) *poster {
	p := &poster{client: c}
	p.batch, _ = c.(BatchClient)
	return p
}

// complete posts req and returns its answer, as Complete would.
func (p *poster) complete(ctx context.Context, req *automatorv1.CompleteRequest) error {
	if p.batch == nil || time.Now().UnixNano() < p.noBatchUntil.Load() {
		_, err := p.client.Complete(ctx, req)
		return err
	}
	o := &postOp{ctx: ctx, req: req, size: proto.Size(req), done: make(chan error, 1), lead: make(chan struct{}, 1)}
	p.mu.Lock()
	p.queue = append(p.queue, o)
	if !p.sending {
		p.sending = true
		p.mu.Unlock()
		p.send()
	} else {
		p.mu.Unlock()
	}
	var err error
	select {
	case err = <-o.done:
	case <-o.lead:
		p.send()
		err = <-o.done
	case <-ctx.Done():
		if o.state.CompareAndSwap(postQueued, postAbandoned) {
			return ctx.Err() // not sent: the sender skips it
		}
		if o.state.Load() == postLeading {
			// Made the next sender meanwhile: it sends the others.
			<-o.lead
			p.send()
		}
		// Sent, or on its way: like a Complete cut off after it was
		// sent, the result may or may not be recorded (deliver keeps it
		// in the spool).
		return ctx.Err()
	}
	if errors.Is(err, errNoBatch) {
		_, err = p.client.Complete(ctx, req)
	}
	return err
}

// send posts the waiting results (the oldest first, within the bounds) in
// one call, answers each, then hands the sending to the oldest result still
// waiting or leaves it free.
func (p *poster) send() {
	p.mu.Lock()
	var batch []*postOp
	bytes := 0
	n := 0
	for _, o := range p.queue {
		if len(batch) == maxPostBatch || (len(batch) > 0 && bytes+o.size > maxPostBatchBytes) {
			break
		}
		n++
		if o.state.CompareAndSwap(postQueued, postTaken) || o.state.CompareAndSwap(postLeading, postTaken) {
			batch = append(batch, o)
			bytes += o.size
		} // else abandoned by its caller
	}
	p.queue = p.queue[n:]
	p.mu.Unlock()

	if len(batch) > 0 {
		p.post(batch)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) > 0 {
		next := p.queue[0]
		if next.state.CompareAndSwap(postQueued, postLeading) {
			next.lead <- struct{}{}
			return
		}
		p.queue = p.queue[1:] // abandoned by its caller
	}
	p.sending = false
}

// post makes one call for batch and answers each of its results. The call
// ends when every result's caller has given up (the proxy stops), and in any
// case after postAttempt.
func (p *poster) post(batch []*postOp) {
	if time.Now().UnixNano() < p.noBatchUntil.Load() {
		// They waited for the call that found out: each goes alone.
		for _, o := range batch {
			o.done <- errNoBatch
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), postAttempt)
	defer cancel()
	var waiting atomic.Int32
	waiting.Store(int32(len(batch)))
	for _, o := range batch {
		stop := context.AfterFunc(o.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	req := &automatorv1.CompleteBatchRequest{Results: make([]*automatorv1.CompleteRequest, len(batch))}
	for i, o := range batch {
		req.Results[i] = o.req
	}
	resp, err := p.batch.CompleteBatch(ctx, req)
	switch {
	case status.Code(err) == codes.Unimplemented:
		p.noBatchUntil.Store(time.Now().Add(batchRetryAfter).UnixNano())
		err = errNoBatch
	case err == nil && len(resp.GetOutcomes()) != len(batch):
		err = status.Errorf(codes.Internal, "the automator answered %d outcomes for %d results", len(resp.GetOutcomes()), len(batch))
	}
	for i, o := range batch {
		e := err
		if e == nil {
			if out := resp.GetOutcomes()[i]; out.GetCode() != int32(codes.OK) {
				e = status.Error(codes.Code(out.GetCode()), out.GetMessage())
			}
		}
		o.done <- e
	}
}

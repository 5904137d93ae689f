package ctxtime

import (
	"context"
	"testing"
	"time"
)

func TestSleepWaitsAllOfItUnlessCancelled(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep of 1ms with a live context: false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep with a cancelled context: true, want false")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Sleep with a cancelled context took %v", took)
	}
}

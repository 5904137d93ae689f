package service

import (
	"testing"

	"github.com/opsgate/opsgate/internal/leaktest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.Options()...) }

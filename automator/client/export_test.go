package client

import "time"

// AnswerWithin is answerWithin, for the tests of package client_test.
const AnswerWithin = answerWithin

// ServerCert is serverCert, for the tests of package client_test.
var ServerCert = serverCert

// SetReconnectWait sets cfg's wait between gRPC's connection attempts
// (reconnectWait).
func SetReconnectWait(cfg *Config, wait time.Duration) { cfg.reconnectWait = wait }

// SetRetryPause sets cfg's pause between a call's rounds of tries
// (retryPause).
func SetRetryPause(cfg *Config, pause time.Duration) { cfg.retryPause = pause }

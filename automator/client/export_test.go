package client

// AnswerWithin is answerWithin, for the tests of package client_test.
const AnswerWithin = answerWithin

// ServerCert is serverCert, for the tests of package client_test.
var ServerCert = serverCert

package client

// AnswerWithin is answerWithin, for the tests of package client_test.
const AnswerWithin = answerWithin

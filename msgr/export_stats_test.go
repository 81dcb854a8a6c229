package msgr

// HandshakeReasonOf classifies a handshake error, as the counters do.
var HandshakeReasonOf = handshakeReason

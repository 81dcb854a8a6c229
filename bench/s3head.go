package bench

// The benchmark's S3 client reads the usual response, a 200 or 206 with
// a Content-Length, from its head in the connection's buffer, without
// net/http's ReadResponse (a Response, a Header map and a string for each
// header, for a response whose only figures are its status and length).
// Anything else, or anything this parser is unsure of, is left to
// ReadResponse, so that the two never read a response differently.

// respHead is a simple response's head.
type respHead struct {
	status int   // 200 or 206
	length int64 // its Content-Length
	n      int   // the head's bytes, its blank line included
}

// parseHead reads a simple response head at the start of b: HTTP/1.1,
// status 200 or 206, a Content-Length, no Transfer-Encoding, and a
// Connection header, if any, of keep-alive. ok is false for anything else,
// b holding no whole head among it.
func parseHead(b []byte) (h respHead, ok bool) {
	const proto = "HTTP/1.1 2"
	if len(b) < len(proto)+3 || string(b[:len(proto)]) != proto {
		return h, false
	}
	switch string(b[len(proto) : len(proto)+2]) {
	case "00":
		h.status = 200
	case "06":
		h.status = 206
	default:
		return h, false
	}
	i := len(proto) + 2
	// The reason phrase: to the end of the line.
	line, i, ok := headLine(b, i)
	if !ok || len(line) > 0 && line[0] != ' ' {
		return h, false
	}
	haveLength := false
	for {
		if line, i, ok = headLine(b, i); !ok {
			return h, false
		}
		if len(line) == 0 {
			break // the blank line: the end of the head
		}
		colon := -1
		for j, c := range line {
			if c == ':' {
				colon = j
				break
			}
			if !tokenByte(c) {
				return h, false // obs-fold, white space before the colon, a bad name
			}
		}
		if colon <= 0 {
			return h, false
		}
		name, val := line[:colon], trimOWS(line[colon+1:])
		switch {
		case equalFoldASCII(name, "content-length"):
			if haveLength || len(val) == 0 || len(val) > 18 {
				return h, false
			}
			for _, c := range val {
				if c < '0' || c > '9' {
					return h, false
				}
				h.length = h.length*10 + int64(c-'0')
			}
			haveLength = true
		case equalFoldASCII(name, "transfer-encoding"):
			return h, false
		case equalFoldASCII(name, "connection"):
			if !equalFoldASCII(val, "keep-alive") {
				return h, false
			}
		}
	}
	h.n = i
	return h, haveLength
}

// headLine is the line of b at i, without its CRLF, and where the next
// begins. A line with a bare CR or LF, or a control byte but tab, is not
// ok: net/http reads such a head otherwise, or not at all.
func headLine(b []byte, i int) (line []byte, next int, ok bool) {
	for j := i; j < len(b); j++ {
		switch c := b[j]; {
		case c == '\r':
			if j+1 < len(b) && b[j+1] == '\n' {
				return b[i:j], j + 2, true
			}
			return nil, 0, false
		case c < ' ' && c != '\t' || c == 0x7f:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// tokenByte: a byte of an HTTP token (a header's name).
func tokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// trimOWS drops the spaces and tabs around a header's value.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFoldASCII compares b with lower, which is lower case ASCII.
func equalFoldASCII(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

package s3gw

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// xmlText is a string of the client's (a key, a prefix, a marker) that a
// response carries as it is. encoding/xml writes each character XML 1.0
// cannot hold (the control characters but tab, newline and carriage
// return; U+FFFE, U+FFFF) as U+FFFD, so a key "a\x01b" would be listed as
// "a\uFFFDb", a key that does not exist: a client paging on it skips every
// key between the two. The gateway writes them as character references
// (&#x1;), as S3 and Ceph's RGW do; Go's XML decoder (rclone, the AWS SDK
// for Go) takes them back, and a stricter parser refuses the document
// rather than read another key. encoding-type=url avoids the question.
//
// MarshalXML marks each such character with private-use runes that
// writeXML turns into its reference once encoding/xml is done: xmlMark
// followed by xmlMarkBase+c for c below 0x20, xmlMarkBase+0x20 and +0x21
// for U+FFFE and U+FFFF, and a doubled xmlMark for xmlMark itself, so no
// string of the client's reads as a mark.
type xmlText string

const (
	xmlMark     = '\uE000'
	xmlMarkBase = '\uE100'
)

func (t xmlText) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	return e.EncodeElement(markXMLText(string(t)), start)
}

// xmlChar reports whether XML 1.0 can hold r (its Char production; Go's
// strings hold no surrogates).
func xmlChar(r rune) bool {
	return r >= 0x20 && r != 0xFFFE && r != 0xFFFF || r == '\t' || r == '\n' || r == '\r'
}

func markXMLText(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !xmlChar(r) || r == xmlMark }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == xmlMark:
			b.WriteRune(xmlMark)
			b.WriteRune(xmlMark)
		case r < 0x20 && !xmlChar(r):
			b.WriteRune(xmlMark)
			b.WriteRune(xmlMarkBase + r)
		case r == 0xFFFE || r == 0xFFFF:
			b.WriteRune(xmlMark)
			b.WriteRune(xmlMarkBase + 0x20 + r - 0xFFFE)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unmarkXMLText turns the marks markXMLText left in doc into character
// references and the doubled marks back into one.
func unmarkXMLText(doc []byte) []byte {
	const markLen = 3 // utf8.RuneLen(xmlMark)
	i := bytes.IndexRune(doc, xmlMark)
	if i < 0 {
		return doc
	}
	out := make([]byte, 0, len(doc)+16)
	for i >= 0 {
		out = append(out, doc[:i]...)
		doc = doc[i+markLen:]
		r, n := utf8.DecodeRune(doc)
		switch {
		case r == xmlMark:
			out = utf8.AppendRune(out, xmlMark)
			doc = doc[n:]
		case r >= xmlMarkBase && r < xmlMarkBase+0x20:
			out = append(out, "&#x"...)
			out = strconv.AppendInt(out, int64(r-xmlMarkBase), 16)
			out = append(out, ';')
			doc = doc[n:]
		case r == xmlMarkBase+0x20 || r == xmlMarkBase+0x21:
			out = append(out, "&#x"...)
			out = strconv.AppendInt(out, int64(0xFFFE+r-xmlMarkBase-0x20), 16)
			out = append(out, ';')
			doc = doc[n:]
		default:
			// A mark no xmlText made (a field that is not one): as it was.
			out = utf8.AppendRune(out, xmlMark)
		}
		i = bytes.IndexRune(doc, xmlMark)
	}
	return append(out, doc...)
}

// errorText is s for an error document: each character XML 1.0 cannot
// hold percent-encoded (a key "a\x01b" as "a%01b") rather than written as
// a character reference as listings write it. A strict parser (expat:
// boto3, the AWS CLI) refuses a document holding "&#x1;", and an SDK that
// cannot read the error loses its code (NoSuchKey, InvalidKey) and has
// only the status; the client knows its own key, and the error is for
// people to read.
func errorText(s string) xmlText {
	if strings.IndexFunc(s, func(r rune) bool { return !xmlChar(r) }) < 0 {
		return xmlText(s)
	}
	var b strings.Builder
	for _, r := range s {
		if xmlChar(r) && r != '%' {
			b.WriteRune(r)
			continue
		}
		for _, c := range []byte(string(r)) {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return xmlText(b.String())
}

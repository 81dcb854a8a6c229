package s3gw

import (
	"encoding/xml"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzXMLText: any valid UTF-8 string written as an xmlText comes back
// whole from the XML, every character XML 1.0 cannot hold as a character
// reference, and nothing else in the document changes.
func FuzzXMLText(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x01b", "\uE000", "\uE000\uE100", "\uE000\uE000x\uE000", "\uFFFE\uFFFF", "<&>\"'\t\n\r", "\x1f\uE11f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		type doc struct {
			XMLName xml.Name `xml:"D"`
			K       xmlText
			Plain   string
		}
		b, err := xml.Marshal(doc{K: xmlText(s), Plain: "p\uE000q"})
		if err != nil {
			t.Fatal(err)
		}
		out := string(unmarkXMLText(b))
		rest, ok := strings.CutPrefix(out, "<D><K>")
		if !ok {
			t.Fatalf("%q", out)
		}
		k, tail, ok := strings.Cut(rest, "</K>")
		if !ok || tail != "<Plain>p\uE000q</Plain></D>" {
			t.Fatalf("the document around the text changed: %q", out)
		}
		if got := unescapeXML(t, k); got != s {
			t.Fatalf("%q came back as %q (%q)", s, got, k)
		}
	})
}

// unescapeXML reads XML character data, references included, as an XML
// parser that takes any reference (unlike encoding/xml) would.
func unescapeXML(t *testing.T, s string) string {
	var b strings.Builder
	for s != "" {
		i := strings.IndexByte(s, '&')
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		ref, rest, ok := strings.Cut(s[i+1:], ";")
		if !ok {
			t.Fatalf("an unterminated reference in %q", s)
		}
		switch {
		case ref == "lt":
			b.WriteByte('<')
		case ref == "gt":
			b.WriteByte('>')
		case ref == "amp":
			b.WriteByte('&')
		case ref == "quot":
			b.WriteByte('"')
		case ref == "apos":
			b.WriteByte('\'')
		case strings.HasPrefix(ref, "#x"):
			n, err := strconv.ParseUint(ref[2:], 16, 32)
			if err != nil {
				t.Fatalf("reference %q: %v", ref, err)
			}
			b.WriteRune(rune(n))
		case strings.HasPrefix(ref, "#"):
			n, err := strconv.ParseUint(ref[1:], 10, 32)
			if err != nil {
				t.Fatalf("reference %q: %v", ref, err)
			}
			b.WriteRune(rune(n))
		default:
			t.Fatalf("unknown reference %q", ref)
		}
		s = rest
	}
	return b.String()
}

func TestErrorText(t *testing.T) {
	for in, want := range map[string]string{"plain/key": "plain/key", "a\x01b": "a%01b", "\x00": "%00", "t\tn\n\uFFFF": "t\tn\n%EF%BF%BF", "é\x1f": "é%1F", "50%\x01": "50%25%01", "50%": "50%"} {
		if got := string(errorText(in)); got != want {
			t.Errorf("errorText(%q) = %q, want %q", in, got, want)
		}
	}
}

package client

import "strings"

// ParseAddrs splits each of in at commas and white space and gives a bare
// HOST:PORT the tcp:// scheme, the one every cluster has unless its
// operator chose otherwise: "10.0.0.1:6800,tcp://10.0.0.2:6800" is
// tcp://10.0.0.1:6800 and tcp://10.0.0.2:6800. Addresses that name a
// scheme ("rdma+verbs://...") are kept as they are. New applies it to
// Options.Seeds and Options.Mon; the CLI to what users type.
func ParseAddrs(in ...string) []string {
	var out []string
	for _, s := range in {
		for _, a := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
			if !strings.Contains(a, "://") {
				a = "tcp://" + a
			}
			out = append(out, a)
		}
	}
	return out
}

package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// sizeUnits maps a unit (lower-cased) to its multiplier. IEC units (KiB)
// are powers of 1024 and SI units (KB) powers of 1000, as the names say,
// so "4KiB" is a page and "4KB" is not.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	"kb": 1e3, "mb": 1e6, "gb": 1e9,
}

// ParseSize parses a byte count with an optional unit: "64", "64B", "4KiB",
// "1MiB", "2GiB", "4KB", "1MB", "1GB". Units are case-insensitive and may
// be separated from the number by a space; fractions are allowed when the
// result is a whole number of bytes ("1.5KiB" is 1536).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimLeftFunc(t[i:], unicode.IsSpace))
	}
	mult, ok := sizeUnits[unit]
	if !ok || num == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit B, KiB, MiB, GiB, KB, MB or GB", s)
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n > math.MaxInt64/mult {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return int64(v), nil
}

// ParseSizes parses a list of sizes, each as ParseSize; elements may also
// be comma-separated lists themselves.
func ParseSizes(list []string) ([]int, error) {
	var out []int
	for _, e := range list {
		for s := range strings.SplitSeq(e, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			n, err := ParseSize(s)
			if err != nil {
				return nil, err
			}
			if n > math.MaxInt32 {
				return nil, fmt.Errorf("size %q: above 2 GiB", s)
			}
			out = append(out, int(n))
		}
	}
	if len(out) == 0 && len(list) > 0 {
		// "--size ,," ran the default sizes, which nobody asked for.
		return nil, fmt.Errorf("no size in %q", strings.Join(list, ","))
	}
	return out, nil
}

// FormatSize writes n with the largest IEC unit that divides it exactly,
// so sizes print as they are usually typed: 64, 4KiB, 1MiB, 1000.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

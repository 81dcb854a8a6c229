package bench

import (
	"slices"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"64", 64}, {"64B", 64}, {"64b", 64}, {" 64 B ", 64},
		{"4KiB", 4096}, {"4kib", 4096}, {"4 KiB", 4096}, {"1MiB", 1 << 20}, {"2GiB", 2 << 30},
		{"4KB", 4000}, {"1MB", 1000000}, {"3GB", 3000000000}, {"1.5KiB", 1536}, {"0.5MiB", 512 << 10},
		{"8388608GiB", 8388608 << 30},
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "KiB", "-1", "4K", "4 kilobytes", "1.0001B", "1e3", "abc", "4KiBs", "8589934592GiB", "9223372036854775808"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes([]string{"64,4KiB", "1MiB", ""})
	if err != nil || !slices.Equal(got, []int{64, 4096, 1 << 20}) {
		t.Errorf("ParseSizes = %v, %v", got, err)
	}
	if _, err := ParseSizes([]string{"64,x"}); err == nil {
		t.Errorf("ParseSizes accepted x")
	}
	if _, err := ParseSizes([]string{"4GiB"}); err == nil {
		t.Errorf("ParseSizes accepted 4GiB")
	}
}

func TestFormatSize(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{{0, "0"}, {64, "64"}, {1000, "1000"}, {4096, "4KiB"}, {1536, "1536"}, {1 << 20, "1MiB"}, {3 << 30, "3GiB"}, {4000, "4000"}} {
		if got := FormatSize(c.in); got != c.want {
			t.Errorf("FormatSize(%d) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, n := range []int64{64, 4096, 1 << 20, 1536, 7 << 30} {
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("round trip of %d: %d, %v", n, back, err)
		}
	}
}

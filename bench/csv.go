package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// WriteCSV writes msgr rows as CSV: a header of the JSON keys, then a
// line per row. WriteObjCSV does the same for object rows.
func WriteCSV(w io.Writer, rows []Row) error { return writeCSV(w, rows) }

// WriteObjCSV writes object rows as CSV, as WriteCSV does msgr rows.
func WriteObjCSV(w io.Writer, rows []ObjRow) error { return writeCSV(w, rows) }

// writeCSV derives the columns from the JSON tags, so that CSV and JSON
// cannot drift apart: every scalar key is a column (a key with omitempty
// too, empty when zero), segment_counts is one column of counts joined by
// spaces, and the latency histogram, which has no place in a flat table,
// is left out (it is in --json).
func writeCSV[T any](w io.Writer, rows []T) error {
	cols := csvColumns(reflect.TypeFor[T](), nil)
	cw := csv.NewWriter(w)
	header := make([]string, len(cols))
	for i, c := range cols {
		header[i] = c.name
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	rec := make([]string, len(cols))
	for _, r := range rows {
		v := reflect.ValueOf(r)
		for i, c := range cols {
			rec[i] = csvField(v.FieldByIndex(c.index), c.omitEmpty)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

type csvColumn struct {
	name      string
	index     []int
	omitEmpty bool
}

// csvColumns lists t's JSON-tagged fields, flattening embedded structs as
// encoding/json does.
func csvColumns(t reflect.Type, prefix []int) []csvColumn {
	var cols []csvColumn
	for i := range t.NumField() {
		f := t.Field(i)
		index := append(append([]int(nil), prefix...), i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			cols = append(cols, csvColumns(f.Type, index)...)
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		if f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
			continue // the histogram
		}
		cols = append(cols, csvColumn{name: name, index: index, omitEmpty: strings.Contains(opts, "omitempty")})
	}
	return cols
}

func csvField(v reflect.Value, omitEmpty bool) string {
	if omitEmpty && v.IsZero() {
		return ""
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprint(v.Interface())
}

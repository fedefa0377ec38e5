package exposition

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Write encodes the families in format, merged in name order with others
// (families gathered elsewhere, sorted by name: the exporter's own), as
// promhttp would write the Gather of both. keep, when not nil, selects
// the families written by name.
func (x *Exposition) Write(w io.Writer, format expfmt.Format, others []*dto.MetricFamily, keep func(name string) bool) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := expfmt.NewEncoder(bw, format)
	openMetrics, direct := directFormat(format)
	var errs []error
	i, j := 0, 0
	for i < len(x.fams) || j < len(others) {
		var f *family
		var mf *dto.MetricFamily
		if j == len(others) || (i < len(x.fams) && x.fams[i].name < others[j].GetName()) {
			f = x.fams[i]
			i++
		} else {
			mf = others[j]
			j++
		}
		name := mf.GetName()
		if f != nil {
			name = f.name
		}
		if keep != nil && !keep(name) {
			continue
		}
		var err error
		switch {
		case f != nil && direct && f.legacyNames():
			err = f.write(bw, openMetrics)
		case f != nil:
			err = enc.Encode(f.dto())
		default:
			err = enc.Encode(mf)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("encoding metric family %s: %w", name, err))
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("finishing the exposition: %w", err))
		}
	}
	if err := bw.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("writing the exposition: %w", err))
	}
	return errors.Join(errs...)
}

// directFormat tells whether Write writes format itself: the text format
// and OpenMetrics 1.0.0 and 0.0.1, which expfmt writes alike but for the
// number format and the counter names.
func directFormat(format expfmt.Format) (openMetrics, ok bool) {
	switch format.FormatType() {
	case expfmt.TypeTextPlain:
		return false, true
	case expfmt.TypeOpenMetrics:
		_, params, err := mime.ParseMediaType(string(format))
		v := params["version"]
		return true, err == nil && (v == expfmt.OpenMetricsVersion_1_0_0 || v == expfmt.OpenMetricsVersion_0_0_1)
	}
	return false, false
}

// legacyNames tells whether the family's names need no quoting or
// escaping in any format (always true of the framework's own), which is
// what writing it without expfmt assumes.
func (f *family) legacyNames() bool {
	if !model.LegacyValidation.IsValidMetricName(f.name) {
		return false
	}
	if f.rows == nil {
		return true // the framework's label names
	}
	switch f.typ {
	case dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_UNTYPED:
	default:
		return false
	}
	// The metrics of one Desc share its label names: those are checked
	// once per Desc, not once per metric (a family has one Desc per
	// provider, and a metric per target).
	var checked *prometheus.Desc
	for _, r := range f.rows {
		m := r.dm
		if m.TimestampMs != nil || (m.Counter != nil && m.Counter.Exemplar != nil) {
			return false
		}
		if r.desc == checked {
			continue
		}
		for _, lp := range m.Label {
			if !model.LegacyValidation.IsValidLabelName(lp.GetName()) {
				return false
			}
		}
		checked = r.desc
	}
	return true
}

// write writes the family as expfmt.MetricFamilyToText (openMetrics
// false) or expfmt.MetricFamilyToOpenMetrics would.
func (f *family) write(w *bufio.Writer, openMetrics bool) error {
	name, sample := f.name, f.name
	typ := ""
	switch f.typ {
	case dto.MetricType_GAUGE:
		typ = "gauge"
	case dto.MetricType_COUNTER:
		typ = "counter"
		if openMetrics {
			if base, ok := strings.CutSuffix(f.name, "_total"); ok {
				name = base
			} else {
				typ = "unknown"
			}
		}
	case dto.MetricType_UNTYPED:
		typ = "untyped"
		if openMetrics {
			typ = "unknown"
		}
	}
	b := w.AvailableBuffer()
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = appendEscaped(b, f.help, openMetrics)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return err
	}
	for i := range f.len() {
		b = w.AvailableBuffer()
		b = append(b, sample...)
		var v float64
		if f.rows != nil {
			m := f.rows[i].dm
			b = append(b, f.rows[i].labels...)
			switch {
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Untyped != nil:
				v = m.Untyped.GetValue()
			}
		} else {
			k := len(f.labels)
			for l, lv := range f.values[i*k : (i+1)*k] {
				b = appendLabel(b, l, f.labels[l], lv)
			}
			if k > 0 {
				b = append(b, '}')
			}
			v = f.nums[i]
		}
		b = append(b, ' ')
		b = appendFloat(b, v, openMetrics)
		b = append(b, '\n')
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func appendLabel(b []byte, i int, name, value string) []byte {
	if i == 0 {
		b = append(b, '{')
	} else {
		b = append(b, ',')
	}
	b = append(b, name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped escapes as expfmt does: backslash and newline, and the
// double quote in label values and OpenMetrics help.
func appendEscaped(b []byte, s string, quote bool) []byte {
	clean := true
	for i := range len(s) {
		if c := s[i]; c == '\\' || c == '\n' || (c == '"' && quote) {
			clean = false
			break
		}
	}
	if clean {
		return append(b, s...)
	}
	for i := range len(s) {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat formats as expfmt's writeFloat, or writeOpenMetricsFloat.
func appendFloat(b []byte, f float64, openMetrics bool) []byte {
	switch {
	case f == 0 && openMetrics: // -0 included, as expfmt has it
		return append(b, "0.0"...)
	case f == 0:
		return append(b, '0')
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	if openMetrics && !bytes.ContainsAny(b[start:], "e.") {
		b = append(b, '.', '0')
	}
	return b
}

// dto returns the family as client_model has it, for the formats expfmt
// writes.
func (f *family) dto() *dto.MetricFamily {
	mf := &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: &f.typ}
	if f.rows != nil {
		mf.Metric = make([]*dto.Metric, len(f.rows))
		for i, r := range f.rows {
			mf.Metric[i] = r.dm
		}
		return mf
	}
	n, k := len(f.nums), len(f.labels)
	ms := make([]dto.Metric, n)
	pairs := make([]dto.LabelPair, n*k)
	ptrs := make([]*dto.LabelPair, n*k)
	var gauges []dto.Gauge
	var counters []dto.Counter
	if f.typ == dto.MetricType_COUNTER {
		counters = make([]dto.Counter, n)
	} else {
		gauges = make([]dto.Gauge, n)
	}
	mf.Metric = make([]*dto.Metric, n)
	for i := range n {
		for l := range k {
			p := &pairs[i*k+l]
			p.Name, p.Value = &f.labels[l], &f.values[i*k+l]
			ptrs[i*k+l] = p
		}
		m := &ms[i]
		m.Label = ptrs[i*k : (i+1)*k : (i+1)*k]
		if counters != nil {
			counters[i].Value = &f.nums[i]
			m.Counter = &counters[i]
		} else {
			gauges[i].Value = &f.nums[i]
			m.Gauge = &gauges[i]
		}
		mf.Metric[i] = m
	}
	return mf
}

package bench

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// variantColors colours bars by variant ID; others cycle through extra.
var variantColors = map[string]string{
	"a": "#8c8c8c", "b": "#4878cf", "c": "#2ca02c", "d": "#d62728",
}

var extraColors = []string{"#9467bd", "#ff7f0e", "#17becf", "#bcbd22"}

// WriteSVG draws the lock results as grouped bars of locks/s: one group per
// workload, one bar per variant and path, coloured by variant, hatched when
// the path is PgBouncer. It is self-contained SVG 1.1 (no script, no
// external font).
func WriteSVG(w io.Writer, title string, results []*Result) error {
	if len(results) == 0 {
		return fmt.Errorf("bench: no results to chart")
	}
	var groups []string
	byGroup := map[string][]*Result{}
	for _, r := range results {
		g := r.Workload.Name
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], r)
	}
	maxBars, top := 0, 0.0
	for _, g := range groups {
		maxBars = max(maxBars, len(byGroup[g]))
		for _, r := range byGroup[g] {
			top = max(top, r.Rate())
		}
	}
	top = niceCeil(top)
	const (
		barW, barGap, groupGap = 26.0, 4.0, 36.0
		left, right, plotTop   = 72.0, 20.0, 56.0
		plotH                  = 300.0
	)
	groupW := float64(maxBars)*(barW+barGap) - barGap
	plotW := float64(len(groups))*(groupW+groupGap) + groupGap
	width := left + plotW + right

	// Legend: one entry per variant (first label seen), then the hatch.
	type entry struct{ id, label string }
	var legend []entry
	seen := map[string]bool{}
	colors := map[string]string{}
	for _, r := range results {
		id := r.Variant.ID
		if seen[id] {
			continue
		}
		seen[id] = true
		c, ok := variantColors[id]
		if !ok {
			c = extraColors[(len(colors))%len(extraColors)]
		}
		colors[id] = c
		legend = append(legend, entry{id, r.Variant.Label()})
	}
	legendTop := plotTop + plotH + 60
	height := legendTop + float64(len(legend)+1)*18 + 12

	var b strings.Builder
	f := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	esc := html.EscapeString
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	f(`<defs><pattern id="hatch" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)"><rect width="6" height="6" fill="white" fill-opacity="0.0"/><line x1="0" y1="0" x2="0" y2="6" stroke="white" stroke-width="2.5"/></pattern></defs>` + "\n")
	f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	f(`<text x="%.0f" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc(title))
	f(`<text x="%.0f" y="42" fill="#555">locks per second (higher is better); hatched: through PgBouncer (transaction mode)</text>`+"\n", left)
	// Axis and grid.
	for i := 0; i <= 5; i++ {
		v := top * float64(i) / 5
		y := plotTop + plotH - plotH*float64(i)/5
		f(`<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+plotW, y)
		f(`<text x="%.0f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, esc(shortNumber(v)))
	}
	f(`<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/>`+"\n", left, plotTop+plotH, left+plotW, plotTop+plotH)
	for gi, g := range groups {
		x0 := left + groupGap + float64(gi)*(groupW+groupGap)
		rs := byGroup[g]
		for bi, r := range rs {
			x := x0 + float64(bi)*(barW+barGap)
			h := 0.0
			if top > 0 {
				h = plotH * r.Rate() / top
			}
			y := plotTop + plotH - h
			tip := fmt.Sprintf("%s, %s, %s: %.0f locks/s", g, r.Variant.Path, r.Variant.Label(), r.Rate())
			f(`<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n", x, y, barW, h, colors[r.Variant.ID], esc(tip))
			if r.Variant.Path == PathPgBouncer {
				f(`<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" fill="url(#hatch)"/>`+"\n", x, y, barW, h)
			}
			cx := x + barW/2
			f(`<text x="%.1f" y="%.1f" font-size="10" text-anchor="start" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n", cx+3, y-3, cx+3, y-3, esc(shortNumber(r.Rate())))
			f(`<text x="%.1f" y="%.0f" font-size="10" text-anchor="middle">%s</text>`+"\n", cx, plotTop+plotH+13, esc(r.Variant.ID+pathMark(r.Variant.Path)))
		}
		f(`<text x="%.1f" y="%.0f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+groupW/2, plotTop+plotH+30, esc(g))
		if len(rs) > 0 {
			f(`<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`+"\n", x0+groupW/2, plotTop+plotH+45, esc(workloadSize(rs[0].Workload)))
		}
	}
	for i, e := range legend {
		y := legendTop + float64(i)*18
		f(`<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s"/>`+"\n", left, y, colors[e.id])
		f(`<text x="%.0f" y="%.0f">%s</text>`+"\n", left+18, y+10, esc(e.label))
	}
	y := legendTop + float64(len(legend))*18
	f(`<text x="%.0f" y="%.0f" fill="#555">bar labels: variant, then D = direct, B = PgBouncer, R = Redis</text>`+"\n", left, y+10)
	f("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func pathMark(p Path) string {
	switch p {
	case PathDirect:
		return "·D"
	case PathPgBouncer:
		return "·B"
	case PathRedis:
		return "·R"
	}
	return ""
}

// shortNumber renders 1234 as "1.2k" and 12345 as "12k".
func shortNumber(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

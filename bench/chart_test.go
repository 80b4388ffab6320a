//go:build benchharness

package bench

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// chart is a grouped bar chart of medians.
type chart struct {
	title, ylabel, file string
	series              []string
	labels              []string
	values              [][]float64 // [series][label]
}

func (c *chart) add(label string, vals ...stat) {
	c.labels = append(c.labels, label)
	for len(c.values) < len(vals) {
		c.values = append(c.values, nil)
	}
	for i, v := range vals {
		c.values[i] = append(c.values[i], v.med)
	}
}

func (c *chart) save(path string) error {
	p := plot.New()
	p.Title.Text = c.title
	p.Y.Label.Text = c.ylabel
	w := vg.Points(14)
	colors := []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255}}
	for i, vals := range c.values {
		bars, err := plotter.NewBarChart(plotter.Values(vals), w)
		if err != nil {
			return err
		}
		bars.Color = colors[i%len(colors)]
		bars.Offset = vg.Length(i-len(c.values)/2) * w
		p.Add(bars)
		if i < len(c.series) {
			p.Legend.Add(c.series[i], bars)
		}
	}
	p.Legend.Top = true
	p.NominalX(c.labels...)
	p.X.Tick.Label.Rotation = 0.4
	p.X.Tick.Label.XAlign = -0.9
	return p.Save(vg.Length(170+55*len(c.labels))*vg.Millimeter/3, 110*vg.Millimeter, path)
}

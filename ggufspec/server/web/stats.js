// One reply's numbers as its tokens stream in: live tokens/s, accept rate, mean accepted length
// and the draft length of every round, from the tokens' marks (ggufspec.server.marks); the
// server's final figures replace the live ones when the stream ends.

export class ReplyStats {
  constructor() {
    this.tokens = 0;
    this.rounds = new Map(); // round -> {drafted, kept}
    this.firstAt = null;
    this.lastAt = null;
    this.final = null; // the usage chunk's {usage, speculative}
  }

  add(marks, now = performance.now()) {
    for (const m of marks) {
      this.tokens += 1;
      if (this.firstAt === null) this.firstAt = now;
      this.lastAt = now;
      if (m.round === 0) continue; // the prompt's token
      const r = this.rounds.get(m.round) || { drafted: m.drafted, kept: 0, by: "draft" };
      if (m.by !== "target") { r.kept += 1; r.by = m.by; }
      this.rounds.set(m.round, r);
    }
  }

  get tps() {
    if (this.final) return this.final.speculative.gen_tps;
    const s = (this.lastAt - this.firstAt) / 1000;
    return this.tokens > 1 && s > 0 ? (this.tokens - 1) / s : 0;
  }

  get drafted() { let n = 0; for (const r of this.rounds.values()) n += r.drafted; return n; }
  get kept() { let n = 0; for (const r of this.rounds.values()) n += r.kept; return n; }
  get acceptRate() {
    if (this.final) return this.final.speculative.accept_rate;
    return this.drafted ? this.kept / this.drafted : 0;
  }
  get meanAcceptedLength() {
    if (this.final) return this.final.speculative.mean_accepted_len;
    return this.rounds.size ? (this.tokens - 1) / this.rounds.size : 0;
  }

  // what a saved message keeps
  toJSON() {
    return { tokens: this.tokens, tps: this.tps, acceptRate: this.acceptRate, meanAcceptedLength: this.meanAcceptedLength,
             rounds: [...this.rounds.values()], final: this.final };
  }
}

const SVG = "http://www.w3.org/2000/svg";

// Bars, one per round: the outline is how many tokens the round drafted, the fill how many the
// target kept (blue: a draft model's, orange: prompt lookup's); a round of the target alone is a
// short grey tick.
export function drawChart(svg, rounds) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const width = 300, height = 80;
  const top = Math.max(1, ...rounds.map((r) => r.drafted));
  const w = width / Math.max(rounds.length, 30);
  rounds.forEach((r, i) => {
    const x = i * w, bw = Math.max(1, w - 1);
    const bar = (cls, h) => {
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("class", cls);
      rect.setAttribute("x", x.toFixed(2)); rect.setAttribute("width", bw.toFixed(2));
      rect.setAttribute("y", (height - h).toFixed(2)); rect.setAttribute("height", h.toFixed(2));
      svg.appendChild(rect);
      return rect;
    };
    if (r.drafted === 0) { bar("alone", 2); return; }
    bar(`kept ${r.by}`, (r.kept / top) * (height - 2));
    const outline = bar(`drafted ${r.by}`, (r.drafted / top) * (height - 2));
    const title = document.createElementNS(SVG, "title");
    title.textContent = `round ${i + 1}: drafted ${r.drafted}, kept ${r.kept}`;
    outline.appendChild(title);
  });
  svg.dataset.rounds = String(rounds.length);
}

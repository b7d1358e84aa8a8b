// SVG / PNG export of what the canvas shows, hand-drawn, with the font embedded.
let fontData: string | null = null;

async function fontCss(): Promise<string> {
  if (fontData === null) {
    try {
      const buf = await (await fetch("/static/Virgil-Regular.woff2")).arrayBuffer();
      let bin = "";
      const bytes = new Uint8Array(buf);
      for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
      fontData = btoa(bin);
    } catch {
      fontData = "";
    }
  }
  return fontData ? `@font-face{font-family:Virgil;src:url(data:font/woff2;base64,${fontData}) format("woff2");}` : "";
}

export async function exportSvg(svg: SVGSVGElement, viewport: SVGGElement): Promise<string> {
  const bbox = viewport.getBBox();
  const pad = 24;
  const clone = viewport.cloneNode(true) as SVGGElement;
  clone.removeAttribute("transform");
  clone.querySelectorAll(".hit, .handle, .drop, #ghost").forEach((e) => e.remove());
  const out = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  out.setAttribute("xmlns", "http://www.w3.org/2000/svg");
  const w = Math.ceil(bbox.width + 2 * pad);
  const h = Math.ceil(bbox.height + 2 * pad);
  out.setAttribute("width", String(w));
  out.setAttribute("height", String(h));
  out.setAttribute("viewBox", `${bbox.x - pad} ${bbox.y - pad} ${w} ${h}`);
  const style = document.createElementNS("http://www.w3.org/2000/svg", "style");
  style.textContent = `${await fontCss()} text{font-family:Virgil,cursive}`;
  out.appendChild(style);
  const bg = document.createElementNS("http://www.w3.org/2000/svg", "rect");
  for (const [k, v] of Object.entries({ x: bbox.x - pad, y: bbox.y - pad, width: w, height: h, fill: "#ffffff" })) bg.setAttribute(k, String(v));
  out.appendChild(bg);
  out.appendChild(clone);
  void svg;
  return new XMLSerializer().serializeToString(out);
}

export async function exportPng(svg: SVGSVGElement, viewport: SVGGElement, scale = 2): Promise<Blob> {
  const text = await exportSvg(svg, viewport);
  const img = new Image();
  const url = URL.createObjectURL(new Blob([text], { type: "image/svg+xml" }));
  await new Promise<void>((resolve, reject) => {
    img.onload = () => resolve();
    img.onerror = () => reject(new Error("the SVG did not load as an image"));
    img.src = url;
  });
  const canvas = document.createElement("canvas");
  canvas.width = img.width * scale;
  canvas.height = img.height * scale;
  const ctx = canvas.getContext("2d")!;
  ctx.scale(scale, scale);
  ctx.drawImage(img, 0, 0);
  URL.revokeObjectURL(url);
  return new Promise((resolve, reject) => canvas.toBlob((b) => (b ? resolve(b) : reject(new Error("no PNG"))), "image/png"));
}

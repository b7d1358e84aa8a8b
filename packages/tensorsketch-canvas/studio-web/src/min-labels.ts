// Names that stay legible when the view is zoomed far out: below the zoom at which a node's
// name would be smaller than MIN_LABEL_PX on screen, each node's name is drawn again in
// screen space (outside the view's transform) at that size, on the node, cut to its width.
import { FONT, NAME_PX, textWidth, type Scene } from "./layout";
import type { View } from "./store";

/** The smallest a node's name is shown on screen, in pixels. */
export const MIN_LABEL_PX = 11;

/** ``name`` cut (with an ellipsis) to fit ``width`` pixels at ``px``. */
export function fitted(name: string, width: number, px: number, measure = textWidth): string {
  if (measure(name, px, FONT) <= width) return name;
  let cut = name;
  while (cut.length > 1 && measure(`${cut}…`, px, FONT) > width) cut = cut.slice(0, -1);
  return `${cut}…`;
}

/** Draw (or clear) the screen-space names over ``scene`` at ``view`` into ``layer``. */
export function drawMinLabels(layer: SVGGElement, scene: Scene | null, view: View): void {
  if (!scene || NAME_PX * view.k >= MIN_LABEL_PX) {
    if (layer.childNodes.length) layer.replaceChildren();
    return;
  }
  const ns = "http://www.w3.org/2000/svg";
  const out: SVGElement[] = [];
  for (const box of scene.boxes.values()) {
    if (box.kind !== "node") continue;
    const w = box.w * view.k - 4;
    if (w < MIN_LABEL_PX) continue; // smaller than a letter: the minimap is the way in
    const x = view.x + box.x * view.k + 2;
    const y = view.y + box.y * view.k;
    const label = fitted(box.id, w, MIN_LABEL_PX);
    const bg = document.createElementNS(ns, "rect");
    const tw = Math.min(w, textWidth(label, MIN_LABEL_PX, FONT) + 4);
    for (const [k, v] of Object.entries({ x: x - 1, y: y + 1, width: tw, height: MIN_LABEL_PX + 3, fill: "#fdfcf8", rx: 2 })) bg.setAttribute(k, String(v));
    const t = document.createElementNS(ns, "text");
    for (const [k, v] of Object.entries({ x: x + 1, y: y + MIN_LABEL_PX + 1, "font-size": MIN_LABEL_PX, "font-family": FONT, fill: "#1e1e1e", "data-node": box.id, class: "min-label" })) t.setAttribute(k, String(v));
    t.textContent = label;
    out.push(bg, t);
  }
  layer.replaceChildren(...out);
}

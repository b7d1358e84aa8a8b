// A minimap for big graphs: every box as a dot-sized rectangle, the visible area as a frame.
import type { Scene } from "./layout";
import type { XY } from "./types";

function bounds(scene: Scene) {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const b of scene.boxes.values()) {
    x0 = Math.min(x0, b.x); y0 = Math.min(y0, b.y);
    x1 = Math.max(x1, b.x + b.w); y1 = Math.max(y1, b.y + b.h);
  }
  return { x0, y0, x1, y1 };
}

function transform(canvas: HTMLCanvasElement, scene: Scene) {
  const b = bounds(scene);
  const pad = 8;
  const s = Math.min((canvas.width - 2 * pad) / (b.x1 - b.x0 || 1), (canvas.height - 2 * pad) / (b.y1 - b.y0 || 1));
  // centred in the minimap
  return { s, ox: (canvas.width - (b.x1 - b.x0) * s) / 2 - b.x0 * s, oy: (canvas.height - (b.y1 - b.y0) * s) / 2 - b.y0 * s };
}

export function drawMinimap(canvas: HTMLCanvasElement, scene: Scene, view: { x: number; y: number; k: number }, W: number, H: number): void {
  const ctx = canvas.getContext("2d");
  if (!ctx) return;
  const { s, ox, oy } = transform(canvas, scene);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.fillStyle = "#ffffffee";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (const b of scene.boxes.values()) {
    ctx.fillStyle = b.node?.has_hole ? "#e8590c" : b.kind === "custom" ? "#adb5bd" : "#495057";
    ctx.fillRect(ox + b.x * s, oy + b.y * s, Math.max(2, b.w * s), Math.max(2, b.h * s));
  }
  ctx.strokeStyle = "#e64980";
  ctx.lineWidth = 2;
  const vx = Math.max(1, ox + (-view.x / view.k) * s);
  const vy = Math.max(1, oy + (-view.y / view.k) * s);
  const vx2 = Math.min(canvas.width - 1, ox + ((W - view.x) / view.k) * s);
  const vy2 = Math.min(canvas.height - 1, oy + ((H - view.y) / view.k) * s);
  ctx.strokeRect(vx, vy, Math.max(4, vx2 - vx), Math.max(4, vy2 - vy));
}

export function minimapToScene(canvas: HTMLCanvasElement, scene: Scene, mx: number, my: number): XY {
  const { s, ox, oy } = transform(canvas, scene);
  const sx = canvas.width / canvas.clientWidth;
  const sy = canvas.height / canvas.clientHeight;
  return { x: (mx * sx - ox) / s, y: (my * sy - oy) / s };
}

// What a hole node's tag says: "needs code", or "unverified" while a fill's draft that did not
// pass its checks sits beside the file (the holes list's status for the node's class).
import type { HoleRef, NodeIR } from "./types";

/** The hole of class ``cls`` in ``file``, as the holes list has it. */
export function holeOf(holes: readonly HoleRef[], file: string, cls: string): HoleRef | undefined {
  return holes.find((hole) => hole.node === cls && hole.file === file);
}

/** Whether ``node`` is a hole whose draft did not pass its checks. */
export function isUnverified(node: NodeIR, holes: readonly HoleRef[], file: string): boolean {
  return !!node.has_hole && holeOf(holes, file, node.cls)?.status === "unverified";
}

/** The tag a hole node wears on the canvas. */
export function holeTag(node: NodeIR, holes: readonly HoleRef[], file: string): string {
  return isUnverified(node, holes, file) ? "unverified" : "needs code";
}

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { START } from "../src/types";
import * as view from "../src/view";
import { box, boxes } from "./fixtures";

const stage = { w: 1000, h: 600 };

describe("fitView", () => {
  test("a small graph is centred at the largest fit zoom", () => {
    const { view: v, overflows } = view.fitView(boxes(box("A", 0, 100, 100, 50)), stage, true);
    assert.equal(v.k, view.FIT_MAX_ZOOM);
    assert.equal(overflows, false);
    // the box's centre (with its tag room above and badge room below) lands mid-stage
    const mid = (0 + 100) / 2;
    assert.equal(v.x + mid * v.k, stage.w / 2);
    const top = 100 - 80;
    const bottom = 100 + 50 + 40;
    assert.equal(v.y + ((top + bottom) / 2) * v.k, stage.h / 2);
  });

  test("the fit button zooms out as far as it takes; the automatic fit stops at a legible zoom", () => {
    const wide = boxes(box(START, 0, 0, 96, 40, "start"), box("far", 20000, 0));
    const byButton = view.fitView(wide, stage, false);
    assert.ok(byButton.view.k < view.LEGIBLE_ZOOM);
    assert.equal(byButton.overflows, false);
    const auto = view.fitView(wide, stage, true);
    assert.equal(auto.view.k, view.LEGIBLE_ZOOM);
    assert.equal(auto.overflows, true);
    assert.equal(auto.view.x, 30 + view.SIDE * view.LEGIBLE_ZOOM, "too wide: the left end shows, 30 px in (and the room its wires take)");
  });

  test("a graph whose height sets the zoom fits whole, centred (no rounding makes it 'too tall')", () => {
    // a top-to-bottom layout: the height binds; at that zoom the span is the stage's height
    // up to rounding, which must not count as overflowing
    for (let bottom = 300; bottom < 2000; bottom++) {
      const column = boxes(box(START, 0, 0, 96, 40, "start"), box("mid", 0, bottom / 2), box("end", 0, bottom, 84, 40, "end"));
      const { view: v, overflows } = view.fitView(column, stage, false);
      assert.equal(overflows, false, `bottom ${bottom}`);
      const top = -80;
      const low = bottom + 40 + 40;
      assert.ok(Math.abs(v.y + ((top + low) / 2) * v.k - stage.h / 2) < 1e-6, `bottom ${bottom}: centred`);
    }
  });

  test("a graph too tall is centred on START's row", () => {
    const tall = boxes(box(START, 0, 10000, 96, 40, "start"), box("top", 0, 0), box("bottom", 0, 20000));
    const { view: v } = view.fitView(tall, stage, true);
    assert.equal(v.y + (10000 + 20) * v.k, stage.h / 2);
  });

  test("a fit keeps clear of the minimap's corner: beside it or above it, whichever is larger", () => {
    const wide = boxes(box("a", 0, 0, 100, 50), box("b", 3000, 0, 100, 50));
    const corner = { w: 248, h: 178 };
    const fitted = view.fitView(wide, stage, false, corner).view;
    const bottom = fitted.y + (50 + 40) * fitted.k;
    assert.ok(bottom <= stage.h - corner.h, "a wide graph fits above the minimap");
    const tall = boxes(box("a", 0, 0, 100, 50), box("b", 0, 3000, 100, 50));
    const t = view.fitView(tall, stage, false, corner).view;
    assert.ok(t.x + (100 + view.SIDE) * t.k <= stage.w - corner.w, "a tall graph fits beside it");
  });

  test("the fit zoom never goes below the minimum", () => {
    const huge = boxes(box("a", 0, 0), box("b", 1e9, 0));
    assert.equal(view.fitView(huge, stage, false).view.k, view.MIN_ZOOM);
  });
});

describe("zoomedAt", () => {
  test("the point under the pointer stays put", () => {
    const before = { x: 10, y: 20, k: 1 };
    const after = view.zoomedAt(before, 2, 300, 200);
    assert.equal(after.k, 2);
    const p = view.sceneAt(before, 300, 200);
    assert.deepEqual(view.sceneAt(after, 300, 200), p);
  });

  test("the zoom is clamped", () => {
    assert.equal(view.zoomedAt({ x: 0, y: 0, k: 3 }, 10, 0, 0).k, view.MAX_ZOOM);
    assert.equal(view.zoomedAt({ x: 0, y: 0, k: 0.03 }, 0.1, 0, 0).k, view.MIN_ZOOM);
  });
});

describe("screenBounds and centring", () => {
  const all = boxes(box("A", 0, 0, 100, 50), box("B", 400, 0, 100, 50));

  test("bounds cover the boxes named, with the marks' margin, at the view's scale", () => {
    assert.equal(view.screenBounds({ x: 0, y: 0, k: 1 }, all, ["nope"]), null);
    assert.deepEqual(view.screenBounds({ x: 10, y: 0, k: 2 }, all, ["A"]), { x0: 10 - 24, y0: -68, x1: 10 + 224, y1: 124 });
    const both = view.screenBounds({ x: 0, y: 0, k: 1 }, all, ["A", "B"])!;
    assert.equal(both.x0, -12);
    assert.equal(both.x1, 512);
  });

  test("centring pans the boxes to the middle without zooming", () => {
    const v = view.centredOn({ x: 0, y: 0, k: 1 }, all, ["B"], stage);
    assert.equal(v.k, 1);
    const b = view.screenBounds(v, all, ["B"])!;
    assert.equal((b.x0 + b.x1) / 2, stage.w / 2);
    assert.equal((b.y0 + b.y1) / 2, stage.h / 2);
  });

  test("boxes that do not fit together centre the first", () => {
    const v = view.centredOn({ x: 0, y: 0, k: 3 }, all, ["A", "B"], stage);
    const a = view.screenBounds(v, all, ["A"])!;
    assert.equal((a.x0 + a.x1) / 2, stage.w / 2);
  });

  test("nothing to centre leaves the view as it was", () => {
    const v = { x: 1, y: 2, k: 3 };
    assert.equal(view.centredOn(v, all, ["nope"], stage), v);
  });

  test("onStage says whether bounds lie wholly on the stage", () => {
    assert.equal(view.onStage({ x0: 0, y0: 0, x1: 1000, y1: 600 }, stage), true);
    assert.equal(view.onStage({ x0: -1, y0: 0, x1: 10, y1: 10 }, stage), false);
    assert.equal(view.onStage({ x0: 0, y0: 0, x1: 10, y1: 601 }, stage), false);
  });

  test("centredAt puts a scene point mid-stage", () => {
    const v = view.centredAt({ x: 0, y: 0, k: 2 }, { x: 100, y: 50 }, stage);
    assert.deepEqual(view.sceneAt(v, stage.w / 2, stage.h / 2), { x: 100, y: 50 });
  });
});

describe("scene geometry", () => {
  test("sceneAt undoes the view's pan and zoom", () => {
    assert.deepEqual(view.sceneAt({ x: 100, y: 50, k: 2 }, 300, 250), { x: 100, y: 100 });
  });

  test("a new node drops left of the middle, towards the bottom", () => {
    assert.deepEqual(view.dropPoint({ x: 0, y: 0, k: 1 }, stage), { x: 410, y: 420 });
  });

  test("freeSpot steps down past the boxes in the way", () => {
    assert.deepEqual(view.freeSpot([], { x: 10.4, y: 20.6 }), { x: 10, y: 21 });
    const inTheWay = [box("A", 0, 0, 200, 90)];
    const q = view.freeSpot(inTheWay, { x: 0, y: 0 });
    assert.equal(q.x, 0);
    assert.equal(q.y, 140, "clear of the box and its 40 px margin, and of its own");
    assert.deepEqual(view.freeSpot(inTheWay, { x: 500, y: 0 }), { x: 500, y: 0 });
  });

  test("the rubber band leaves and arrives horizontally", () => {
    assert.equal(view.rubberBand({ x: 0, y: 0 }, { x: 200, y: 50 }), "M 0 0 C 100 0, 100 50, 200 50");
    assert.equal(view.rubberBand({ x: 0, y: 0 }, { x: 10, y: 0 }), "M 0 0 C 40 0, -30 0, 10 0");
  });

  test("a dragged node lands as far as the pointer moved, in whole units", () => {
    assert.deepEqual(view.dropAt({ x: 10, y: 10 }, { x: 0, y: 0 }, { x: 5.6, y: -2.2 }), { x: 16, y: 8 });
  });
});

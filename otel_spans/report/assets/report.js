(function () {
  "use strict";
  window.addEventListener("error", function (e) {
    document.body.setAttribute("data-js-error", String(e.message));
  });
  function cellValue(td) {
    var text = td.textContent.trim();
    var m = text.match(/^\+?(-?[0-9.,]+)\s*(µs|ms|s|min|h|%|×)?/);
    if (!m) { return text.toLowerCase(); }
    var n = parseFloat(m[1].replace(/,/g, ""));
    var unit = {"µs": 1e-6, "ms": 1e-3, "min": 60, "h": 3600}[m[2]] || 1;
    if (m[2] === "min" || m[2] === "h") {
      var rest = text.match(/([0-9]+)\s*(s|min)$/);
      n = n * unit + (rest ? parseFloat(rest[1]) * (rest[2] === "min" ? 60 : 1) : 0);
      return n;
    }
    return n * unit;
  }
  document.querySelectorAll("button[data-zoom]").forEach(function (button) {
    button.addEventListener("click", function () {
      var svg = document.getElementById("graph-svg");
      var scale = (parseFloat(svg.getAttribute("data-scale")) || 1) *
        parseFloat(button.getAttribute("data-zoom"));
      svg.setAttribute("data-scale", String(scale));
      svg.setAttribute("width", String(parseFloat(svg.getAttribute("data-width")) * scale));
      svg.setAttribute("height", String(parseFloat(svg.getAttribute("data-height")) * scale));
    });
  });
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, column) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var desc = !th.classList.contains("sorted-desc");
        table.querySelectorAll("th").forEach(function (other) {
          other.classList.remove("sorted-asc", "sorted-desc");
        });
        th.classList.add(desc ? "sorted-desc" : "sorted-asc");
        rows.sort(function (a, b) {
          var x = cellValue(a.cells[column]), y = cellValue(b.cells[column]);
          var order = x < y ? -1 : x > y ? 1 : 0;
          return desc ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
  document.querySelectorAll("tr[data-cp]").forEach(function (row) {
    var bar = document.getElementById("cp-" + row.getAttribute("data-cp"));
    if (!bar) { return; }
    row.addEventListener("mouseenter", function () {
      bar.classList.add("hl"); row.classList.add("hl");
    });
    row.addEventListener("mouseleave", function () {
      bar.classList.remove("hl"); row.classList.remove("hl");
    });
  });
  var svg = document.getElementById("waterfall-svg");
  if (svg) {
    var line = document.getElementById("cursor");
    var label = document.getElementById("cursor-label");
    var x0 = parseFloat(svg.getAttribute("data-x0"));
    var w = parseFloat(svg.getAttribute("data-w"));
    var seconds = parseFloat(svg.getAttribute("data-seconds"));
    svg.addEventListener("mousemove", function (e) {
      var point = svg.createSVGPoint();
      point.x = e.clientX; point.y = e.clientY;
      var p = point.matrixTransform(svg.getScreenCTM().inverse());
      var inside = p.x >= x0 && p.x <= x0 + w;
      line.setAttribute("visibility", inside ? "visible" : "hidden");
      label.setAttribute("visibility", inside ? "visible" : "hidden");
      if (!inside) { return; }
      line.setAttribute("x1", p.x); line.setAttribute("x2", p.x);
      label.setAttribute("x", p.x + 4);
      label.textContent = "+" + ((p.x - x0) / w * seconds).toFixed(3) + " s";
    });
  }
  document.body.setAttribute("data-ready", "1");
})();

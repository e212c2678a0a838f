// Progressive enhancement only: every page works without this file. The timeline's
// sliders set the at / known_at fields (ISO 8601, UTC) and show the page for them.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("timeline-form");
  if (!form) return;
  for (const slider of document.querySelectorAll("input[data-slider]")) {
    const field = form.querySelector(`input[data-instant="${slider.dataset.slider}"]`);
    if (!field) continue;
    const show = () => {
      field.value = new Date(Number(slider.value) * 1000).toISOString().replace(".000Z", "Z");
    };
    slider.addEventListener("input", show);
    slider.addEventListener("change", () => { show(); form.requestSubmit(); });
  }
});

// Drag and drop onto the upload form's file input; the form still works without JavaScript.
(function () {
  const zone = document.getElementById("dropzone");
  if (!zone) return;
  const input = zone.querySelector("input[type=file]");
  const name = document.getElementById("dropzone-name");
  const show = () => { if (input.files.length) name.textContent = input.files[0].name + " (" + input.files[0].size + " bytes)"; };
  input.addEventListener("change", show);
  ["dragenter", "dragover"].forEach((type) => zone.addEventListener(type, (event) => {
    event.preventDefault();
    zone.classList.add("over");
  }));
  ["dragleave", "drop"].forEach((type) => zone.addEventListener(type, () => zone.classList.remove("over")));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    if (event.dataTransfer.files.length) {
      input.files = event.dataTransfer.files;
      show();
    }
  });
})();

/* Add a product by its barcode: where the browser has the BarcodeDetector API (Chrome on
   Android, among others), a "Scan" button reads the JAN code with the camera, fills the
   field and sends the form. Elsewhere the button stays hidden and typing the digits is the
   way; the server checks the code either way. Every word comes from the page. */
(function () {
  "use strict";
  var form = document.querySelector("form[data-scan-form]");
  if (!form || !("BarcodeDetector" in window) || !navigator.mediaDevices) return;
  var button = form.querySelector("[data-scan]");
  var video = form.querySelector("[data-scan-video]");
  var status = form.querySelector("[data-scan-status]");
  var field = form.querySelector("input[name=jan]");
  var detector;
  try {
    detector = new window.BarcodeDetector({ formats: ["ean_13", "ean_8"] });
  } catch (error) {
    return;
  }
  button.hidden = false;

  function say(key) {
    status.textContent = status.dataset[key];
    status.hidden = false;
  }

  function stop(stream) {
    stream.getTracks().forEach(function (track) { track.stop(); });
    video.hidden = true;
  }

  button.addEventListener("click", function () {
    navigator.mediaDevices
      .getUserMedia({ video: { facingMode: "environment" } })
      .then(function (stream) {
        video.srcObject = stream;
        video.hidden = false;
        say("msgPoint");
        return video.play().then(function () {
          function look() {
            detector.detect(video).then(function (codes) {
              if (codes.length) {
                stop(stream);
                field.value = codes[0].rawValue;
                form.submit();
              } else {
                window.requestAnimationFrame(look);
              }
            }, function () { stop(stream); say("msgDenied"); });
          }
          look();
        });
      })
      .catch(function () { say("msgDenied"); });
  });
})();

// Starts Swagger UI on the service's own /openapi.json (same origin, so `connect-src 'self'`
// covers it and "Try it out" sends requests to this service). Kept out of index.html so the
// page needs no 'unsafe-inline'.
(function () {
  'use strict';
  // Any Content-Security-Policy violation is recorded on <html data-csp-violations="...">, so
  // a headless browser (.ci/clients) can tell that the page ran under the CSP without losses.
  var violations = [];
  document.addEventListener('securitypolicyviolation', function (event) {
    violations.push(event.violatedDirective + ' ' + event.blockedURI);
    document.documentElement.setAttribute('data-csp-violations', violations.join(' | '));
  });

  window.ui = SwaggerUIBundle({
    url: '/openapi.json',
    dom_id: '#docs',
    layout: 'BaseLayout', // no top bar: the page shows this service's document only
    presets: [SwaggerUIBundle.presets.apis],
    deepLinking: true, // /docs#/tag/operation_id opens that operation
    validatorUrl: null, // no call to the public validator: the page works offline
    docExpansion: 'list',
    filter: true,
    tryItOutEnabled: false,
    persistAuthorization: false,
  });
})();

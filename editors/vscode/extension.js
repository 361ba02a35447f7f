// The plan extension: starts `plan lsp` (setting `plan.server.command`) over stdio for `.plan` files.
"use strict";
const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

async function activate(context) {
  const command = vscode.workspace.getConfiguration("plan").get("server.command", ["plan", "lsp"]);
  if (!Array.isArray(command) || command.length === 0) {
    vscode.window.showErrorMessage("plan: `plan.server.command` must be a non-empty list, e.g. [\"plan\", \"lsp\"]");
    return;
  }
  const server = { command: command[0], args: command.slice(1), transport: TransportKind.stdio };
  client = new LanguageClient("plan", "plan language server", { run: server, debug: server }, {
    documentSelector: [{ scheme: "file", language: "plan" }, { scheme: "untitled", language: "plan" }],
  });
  context.subscriptions.push(vscode.workspace.onDidChangeConfiguration(async (e) => {
    if (e.affectsConfiguration("plan.server.command")) {
      vscode.window.showInformationMessage("plan: reload the window to use the new server command");
    }
  }));
  try {
    await client.start();
  } catch (err) {
    vscode.window.showErrorMessage(`plan: could not start \`${command.join(" ")}\`: ${err.message || err}. ` +
      "Install it (pip install \"plan-dsl[lsp]\") or set `plan.server.command`.");
  }
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };

import Foundation
import X509

/// Loads the certificates trusted as roots of the App Store signing chain.
public enum TrustRoots {
    /// The certificates in `file`: DER, or PEM with one or more `CERTIFICATE` blocks. A folder
    /// (a sandbox store's, say) gives the self-signed certificates among its `.pem`, `.der`,
    /// `.cer` and `.crt` files, never an intermediate or leaf beside them.
    /// A missing or unreadable file is a configuration error (`usage`).
    public static func load(_ file: URL) throws -> [Certificate] {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: file.path, isDirectory: &isDirectory), isDirectory.boolValue {
            return try loadFolder(file)
        }
        let data: Data
        do {
            data = try Data(contentsOf: file)
        } catch {
            var unreadable = CourierError.unreadable("the trusted root", path: file.path, error: error)
            unreadable.hint = "pass a DER or PEM certificate with --trust-root, or fix receipts.trustRoots"
            throw unreadable
        }
        if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN") {
            let blocks = pemBlocks(text)
            let certificates = blocks.compactMap { try? Certificate(pemEncoded: $0) }
            guard !certificates.isEmpty, certificates.count == blocks.count else {
                throw CourierError(.usage, "\(file.path) holds no readable PEM certificate")
            }
            return certificates
        }
        do {
            return [try Certificate(derEncoded: Array(data))]
        } catch {
            // The parser's error names its own source line (ASN1Error…: ASN1.swift:202): not for users.
            throw CourierError(.usage, "the trusted root \(file.path) is not a DER or PEM certificate")
        }
    }

    static func loadFolder(_ folder: URL) throws -> [Certificate] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        let extensions: Set<String> = ["pem", "der", "cer", "crt"]
        let roots = names.sorted()
            .filter { extensions.contains(($0 as NSString).pathExtension.lowercased()) && !$0.hasSuffix(".key.pem") }
            .flatMap { (try? load(folder.appendingPathComponent($0))) ?? [] }
            .filter { $0.subject == $0.issuer }
        var unique: [Certificate] = []
        for root in roots where !unique.contains(root) { unique.append(root) }
        guard !unique.isEmpty else {
            throw CourierError(.usage, "\(folder.path) holds no self-signed root certificate")
        }
        return unique
    }

    /// The certificates of every file in `files`, in order.
    public static func load(_ files: [URL]) throws -> [Certificate] {
        try files.flatMap { try load($0) }
    }

    /// The `CERTIFICATE` blocks of a PEM text, each with its BEGIN and END lines.
    static func pemBlocks(_ text: String) -> [String] {
        var blocks: [String] = []
        var current: [Substring]?
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed == "-----BEGIN CERTIFICATE-----" {
                current = [Substring(trimmed)]
            } else if trimmed == "-----END CERTIFICATE-----", var lines = current {
                lines.append(Substring(trimmed))
                blocks.append(lines.joined(separator: "\n"))
                current = nil
            } else if current != nil {
                current?.append(Substring(trimmed))
            }
        }
        return blocks
    }
}

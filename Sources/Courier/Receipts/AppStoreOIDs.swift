import SwiftASN1

/// The object identifiers Apple puts in its App Store signing chain.
public enum AppStoreOIDs {
    /// Marks the leaf that signs App Store receipts and transactions (Apple's "Mac App Store
    /// Receipt Signing" marker, 1.2.840.113635.100.6.11.1).
    public static let receiptSigner: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]
    /// Marks the Apple Worldwide Developer Relations intermediate (1.2.840.113635.100.6.2.1).
    public static let wwdrIntermediate: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
}
